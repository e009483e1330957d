"""Helpers for the broker tests of strom.tasks: topics, producing tasks, reading offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable

from confluent_kafka import TopicPartition

from strom.kafka import clients


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, partitions: int = 1, prefix: str = "tasks") -> str:
    name = unique(prefix)
    clients.create_topics(bootstrap, {name: partitions})
    return name


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> int:
    producer = clients.producer(bootstrap)
    count = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
    assert producer.flush(30) == 0
    return count


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


def read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 20.0) -> list:
    consumer = clients.consumer(bootstrap, group_id=unique("reader"))
    consumer.subscribe([topic])
    messages: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            messages += [m for m in consumer.consume(100, 0.2) if m.error() is None]
    finally:
        consumer.close()
    return messages


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, tick_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(tick_s)
    return predicate()
