"""One local SparkSession for all Spark tests (start-up is slow on 2 cores) and topic helpers."""

from __future__ import annotations

import itertools
import uuid

import pytest

from strom.kafka import clients
from support import kafka

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


@pytest.fixture
def produce():
    """``produce(bootstrap, topic, [(key, value[, partition, headers, timestamp_ms]), ...])``."""
    return kafka.produce


@pytest.fixture
def consume_all():
    """``consume_all(bootstrap, topic, expected=None, timeout=30, isolation="read_committed")``: every record
    of the topic to the end of each partition (read again until ``expected`` records arrived)."""
    return kafka.read_topic
