"""Hostile input and resource exhaustion (issue #20): raw frames through the broker's own protocol
types; each input is refused or bounded, and the broker keeps serving everyone else."""

from __future__ import annotations

import datetime
import struct
import time

import pytest
from broker_helpers import unique
from crc32c import crc32c
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import i16, i32

from strom.broker.log.records import CRC_START, build_batch
from strom.kafka import clients
from strom.kafka.wire import WireClient

pytestmark = pytest.mark.broker


def forge(batch: bytes, **fields: int) -> bytes:
    """`batch` with header fields overwritten (CRC recomputed: only the content is wrong)."""
    offsets = {"attributes": (21, ">h"), "last_offset_delta": (23, ">i"), "producer_id": (43, ">q"),
               "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"), "records_count": (57, ">i")}
    forged = bytearray(batch)
    for name, value in fields.items():
        position, fmt = offsets[name]
        struct.pack_into(fmt, forged, position, value)
    struct.pack_into(">I", forged, 17, crc32c(memoryview(forged)[CRC_START:]))
    return bytes(forged)


def produce_raw(bootstrap: str, topic: str, records: bytes, transactional_id: str | None = None,
                partition: int = 0) -> tuple[ErrorCode, int]:
    request = produce.ProduceRequest(
        transactional_id=transactional_id, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
        topic_data=(produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=i32(partition), records=records),)),))
    with WireClient(bootstrap) as client:
        answer = client.send(request).responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def now_ms() -> int:
    return int(time.time() * 1000)


def test_offset_delta_that_disagrees_with_the_record_count_is_invalid_record(broker):
    topic = unique("delta")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    one = build_batch([(b"k", b"v")], now_ms())
    forged = forge(one, last_offset_delta=2**31 - 1)
    code, _ = produce_raw(broker.bootstrap_servers, topic, forged * 3)
    assert code == ErrorCode.invalid_record
    code, _ = produce_raw(broker.bootstrap_servers, topic, forge(one, records_count=5))
    assert code == ErrorCode.invalid_record
    assert produce_raw(broker.bootstrap_servers, topic, one) == (ErrorCode.none, 0), "nothing was written"
