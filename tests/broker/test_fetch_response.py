"""The hand-written Fetch response encoding equals kio's, byte for byte, for every served version."""

from __future__ import annotations

import io

import pytest
from kio.index import load_response_schema
from kio.serial import entity_writer

from strom.broker.fetch_response import PartitionData, encode
from strom.broker.log.records import build_batch
from strom.broker.protocol import build

RECORDS = build_batch([(b"k", b"v"), (None, b"w")], 1_700_000_000_000, 42)
PARTITIONS = [
    PartitionData(0, 0, 44, 40, 3, [(7, 41), (9, 43)], RECORDS),
    PartitionData(1, 1, 10, 10, 0, None, b""),
]


def _kio_frame(version: int) -> bytes:
    schema = load_response_schema(1, version)
    data = {"error_code": 0, "session_id": 0, "responses": [
        {"topic": "tópico", "partitions": [
            {"partition_index": p.partition_index, "error_code": p.error_code,
             "high_watermark": p.high_watermark, "last_stable_offset": p.last_stable_offset,
             "log_start_offset": p.log_start_offset, "preferred_read_replica": -1,
             "aborted_transactions": None if p.aborted_transactions is None else
             [{"producer_id": pid, "first_offset": first} for pid, first in p.aborted_transactions],
             "records": p.records} for p in PARTITIONS]},
        {"topic": "empty", "partitions": []}]}
    buffer = io.BytesIO()
    header = schema.__header_schema__
    entity_writer(header)(buffer, header(correlation_id=123))
    entity_writer(schema)(buffer, build(schema, data))
    body = buffer.getvalue()
    return len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize("version", range(4, 13))
def test_matches_kio(version):
    encoded = encode(version, 123, [("tópico", PARTITIONS), ("empty", [])])
    assert encoded.to_bytes() == _kio_frame(version)
