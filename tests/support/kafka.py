"""Kafka helpers shared by the tests: names, topics, producing records and reading topics to their end.

Reading goes through ``strom.kafka.reading``, the loop the engine restores its stores with, so a test
that reads what a topology wrote stops at the end of every partition instead of guessing a timeout.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from strom.errors import UnknownTopicError
from strom.kafka import clients
from strom.kafka.reading import end_consumer, partitions_of, read_to_end


class Record(NamedTuple):
    """A record to produce; ``partition`` -1 lets the partitioner choose, ``timestamp`` 0 means now."""

    key: bytes | str | None
    value: bytes | str | None
    partition: int = -1
    headers: Any = None
    timestamp: int = 0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, partitions: int = 1, prefix: str = "topic") -> str:
    """A fresh topic named ``<prefix>-<random>``."""
    name = unique(prefix)
    clients.create_topics(bootstrap, {name: partitions})
    return name


def _bytes(data: bytes | str | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def produce(bootstrap: str, topic: str, records: Iterable[tuple], flush_s: float = 30.0,
            **producer_overrides: Any) -> int:
    """Writes ``records`` (tuples in ``Record``'s order: key, value[, partition, headers, timestamp]; str
    keys and values as UTF-8) and waits up to ``flush_s`` until every one is acknowledged; returns how
    many."""
    producer = clients.producer(bootstrap, **producer_overrides)
    count = 0
    for record in (Record(*fields) for fields in records):
        clients.produce(producer, topic, _bytes(record.value), _bytes(record.key), partition=record.partition,
                        headers=record.headers, timestamp=record.timestamp)
        producer.poll(0)
        count += 1
    assert producer.flush(flush_s) == 0, f"{len(producer)} records not acknowledged within {flush_s} s"
    return count


def read_partition(bootstrap: str, topic: str, partition: int, start: int = OFFSET_BEGINNING,
                   **consumer_overrides: Any) -> list[Message]:
    """The records of one partition from ``start`` to its end (read_committed unless overridden)."""
    consumer = end_consumer(bootstrap, **consumer_overrides)
    try:
        return list(read_to_end(consumer, [TopicPartition(topic, partition, start)], stall_timeout_s=30))
    finally:
        consumer.close()


def read_topic(bootstrap: str, topic: str, expected: int | None = None, timeout: float = 30.0,
               isolation: str = "read_committed") -> list[Message]:
    """Every record of ``topic`` to the end of each partition; with ``expected``, reads again until there
    are at least that many or ``timeout`` passed (what an asynchronous writer has written by then)."""
    deadline = time.monotonic() + timeout
    consumer = end_consumer(bootstrap, **{"isolation.level": isolation})
    try:
        while True:
            try:
                partitions = partitions_of(consumer, topic)
            except UnknownTopicError:  # an asynchronous writer may create it
                if expected is None or time.monotonic() > deadline:
                    raise
                partitions = []
            starts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
            records = list(read_to_end(consumer, starts, stall_timeout_s=timeout))
            if expected is None or len(records) >= expected or time.monotonic() > deadline:
                return records
            time.sleep(0.1)
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = clients.consumer(bootstrap)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = clients.consumer(bootstrap, group_id=group)
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, tick_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(tick_s)
    return predicate()
