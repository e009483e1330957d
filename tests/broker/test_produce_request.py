"""The zero-copy Produce parser reads what kio reads and rejects garbage; the hand-encoded Produce
response equals kio's; for every served version."""

from __future__ import annotations

import contextlib
import datetime
import io
import random

import pytest
from kio.index import load_request_schema
from kio.serial import entity_writer

from strom.broker.log.records import build_batch
from strom.broker.produce_request import parse_produce
from strom.broker.produce_response import PartitionResult
from strom.broker.produce_response import encode as encode_produce_response
from strom.broker.protocol import MalformedRequest, build, encode_response, parse_request

BATCH = build_batch([(b"k", b"v"), (None, b"w" * 300)], 1_700_000_000_000)


def _frame(version: int, transactional_id: str | None) -> memoryview:
    schema = load_request_schema(0, version)
    body = build(schema, {"transactional_id": transactional_id, "acks": -1,
                          "timeout": datetime.timedelta(milliseconds=30000), "topic_data": [
                              {"name": "tópico", "partition_data": [{"index": 0, "records": BATCH},
                                                                    {"index": 3, "records": None}]},
                              {"name": "other", "partition_data": []}]})
    header = schema.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header)(buffer, header(request_api_key=0, request_api_version=version, correlation_id=77,
                                         client_id="me"))
    entity_writer(schema)(buffer, body)
    return memoryview(buffer.getvalue()).toreadonly()


@pytest.mark.parametrize("version", range(3, 10))
@pytest.mark.parametrize("transactional_id", [None, "txn-1"])
def test_matches_kio(version, transactional_id):
    frame = _frame(version, transactional_id)
    ours, theirs = parse_produce(frame), parse_request(frame)
    assert (ours.correlation_id, ours.client_id) == (theirs.correlation_id, theirs.client_id) == (77, "me")
    assert ours.body.transactional_id == theirs.body.transactional_id == transactional_id
    assert ours.body.acks == theirs.body.acks == -1
    mine = [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in ours.body.topic_data]
    kio = [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in theirs.body.topic_data]
    assert mine == kio


def test_truncated_or_noisy_frames_raise_only_malformed_request():
    rng = random.Random(7)
    valid = bytes(_frame(9, None))
    for _ in range(300):
        with pytest.raises(MalformedRequest):
            parse_produce(memoryview(valid[:rng.randint(8, len(valid) - 1)]))
        noisy = bytearray(valid)
        for _ in range(3):
            noisy[rng.randint(8, len(noisy) - 1)] = rng.randint(0, 255)
        with contextlib.suppress(MalformedRequest):  # noise may still parse; nothing else may escape
            parse_produce(memoryview(bytes(noisy)))


@pytest.mark.parametrize("version", range(3, 10))
def test_response_matches_kio(version):
    results = [PartitionResult(0, 0, 42, -1, 3), PartitionResult(5, 2, error_message="CRC mismatch"),
               PartitionResult(7, 0, 9, 1_700_000_000_123, 0)]
    ours = encode_produce_response(version, 99, [("tópico", results), ("none", [])])
    data = {"responses": [
        {"name": "tópico", "partition_responses": [
            {"index": r.index, "error_code": r.error_code, "base_offset": r.base_offset,
             "log_append_time": None if r.log_append_time < 0 else r.log_append_time,
             "log_start_offset": r.log_start_offset, "error_message": r.error_message} for r in results]},
        {"name": "none", "partition_responses": []}]}
    assert ours == encode_response(0, version, 99, data)
