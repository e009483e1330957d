"""Fixtures of the Spark runtime tests (the SparkSession is tests/spark/conftest.py's): fresh topics,
both execution modes, producing and reading helpers."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.spark.runtime import SparkStreams
from support.kafka import produce, read_topic

from .wordcount import L, S


@pytest.fixture(params=["realtime", "microbatch"])
def mode_props(request) -> dict[str, Any]:
    """Runs a test in both execution modes (props to add); real-time batches of 2 s, so that tests
    cross batch ends (tasks kept open, handed over or reopened) as a long-running application does."""
    if request.param == "realtime":
        return {"execution.mode": "realtime", "realtime.batch.duration.ms": 2000}
    return {"execution.mode": "microbatch"}


@pytest.fixture
def topics(broker):
    """``topics(lines=2, counts=2)`` creates fresh topics; returns their real names by alias."""

    def create(**partitions: int) -> dict[str, str]:
        names = {alias: f"rt-{alias}-{uuid.uuid4().hex[:8]}" for alias in partitions}
        clients.create_topics(broker.bootstrap_servers, {names[a]: n for a, n in partitions.items()})
        return names

    return create


def produce_lines(bootstrap: str, topic: str, lines: Iterable[tuple[str, str]],
                  flush_s: float = 30.0) -> None:
    """Writes (key, line) records, keyed as Kafka's Java clients would partition them."""
    produce(bootstrap, topic, lines, flush_s, **JAVA_PARTITIONER)


def read_updates(bootstrap: str, topic: str, timeout: float = 60.0,
                 value_serde: Any = L) -> dict[str, list[Any]]:
    """Every update of ``topic`` read read_committed, in order per key (values Long unless told)."""
    updates: dict[str, list[Any]] = defaultdict(list)
    for message in read_topic(bootstrap, topic, timeout=timeout):
        updates[S.deserializer().deserialize(topic, message.key())].append(
            value_serde.deserializer().deserialize(topic, message.value()))
    return dict(updates)


def produce_steadily(bootstrap: str, topic: str, lines: list[tuple[str, str]], seconds: float) -> None:
    """Writes ``lines`` spread evenly over ``seconds``, in 20 flushed slices: input that keeps arriving."""
    slices = 20
    for i in range(slices):
        produce_lines(bootstrap, topic, lines[i * len(lines) // slices:(i + 1) * len(lines) // slices])
        time.sleep(seconds / slices)


@pytest.fixture(autouse=True)
def _close_parked_tasks():
    """Tasks a test's batches left open in this process are closed before the next test."""
    yield
    from strom.spark.runtime.parked import PARKED

    PARKED.close_all()


def run_until_caught_up(spark, topology, broker, state_dir, app_id: str, **props) -> SparkStreams:
    """Runs ``topology`` exactly-once on Spark until every input record is committed, then stops it;
    ``props`` override the defaults (``commit.interval.ms`` 200, ``max.offsets.per.trigger`` 200)."""
    app = SparkStreams(topology, {
        "application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(state_dir),
        "commit.interval.ms": 200, "max.offsets.per.trigger": 200, **props}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
    finally:
        app.stop()
    return app


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    """Polls ``condition`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
