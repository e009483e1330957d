"""One local SparkSession for all Spark tests (start-up is slow on 2 cores) and topic helpers."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterable

import pytest
from confluent_kafka import KafkaError, TopicPartition

from strom.kafka import clients

_names = itertools.count()


@pytest.fixture(scope="session")
def spark():
    import strom.spark

    session = strom.spark.session(app_name="strom-tests", log_level="ERROR")
    yield session
    session.stop()


@pytest.fixture
def new_topic(broker):
    """Creates a fresh topic per call: ``new_topic(partitions=2)`` → its name."""

    def create(partitions: int = 1) -> str:
        name = f"spark-{next(_names)}-{uuid.uuid4().hex[:8]}"
        clients.create_topics(broker.bootstrap_servers, {name: partitions})
        return name

    return create


def _produce(bootstrap: str, topic: str, records: Iterable[tuple], **overrides) -> None:
    """records: (key, value) or (key, value, partition) or (key, value, partition, headers, ts_ms)."""
    producer = clients.producer(bootstrap, **overrides)
    for record in records:
        key, value, *rest = record
        partition = rest[0] if rest else -1
        headers = rest[1] if len(rest) > 1 else None
        timestamp = rest[2] if len(rest) > 2 else 0
        producer.produce(topic, value, key, partition=partition, headers=headers, timestamp=timestamp)
        producer.poll(0)
    assert producer.flush(30) == 0


def _consume_all(bootstrap: str, topic: str, expected: int | None = None, timeout: float = 30.0,
                isolation: str = "read_committed") -> list:
    """Every record of ``topic`` from the beginning, stopping at the end of all partitions."""
    consumer = clients.consumer(bootstrap, **{"enable.partition.eof": True, "isolation.level": isolation})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, -2) for p in meta.partitions])
    records, at_end = [], set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
                if len(at_end) == len(meta.partitions) and (expected is None or len(records) >= expected):
                    break
                continue
            raise AssertionError(message.error().str())
        at_end.discard(message.partition())
        records.append(message)
    consumer.close()
    return records


@pytest.fixture
def produce():
    return _produce


@pytest.fixture
def consume_all():
    return _consume_all
