"""Decaton's key-ordered concurrency inside an exactly_once_v2 topology on Spark (real-time mode), with
a stream thread's Python worker SIGKILLed mid-run: read read_committed, every input record's output is
there exactly once and in its key's order. A commit waits for the records in flight
(ConcurrentProcessor.flush), so no offset is committed before its record was finished: had one been,
the kill would have lost that record's output."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from strom.spark.runtime import SparkStreams
from strom.streams import Consumed, Produced, Serdes, StreamsBuilder

from .conftest import produce_steadily, read_updates, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

S = Serdes.String()
KEYS = [f"k{i}" for i in range(16)]


def enrich(lines: str, out: str, concurrency: int):
    """The step is defined here so Spark ships it by value (a test module is not importable by workers)."""

    def slow_lookup(value: str) -> str:
        """An I/O-bound step: a few milliseconds each, so records are in flight at every commit."""
        time.sleep(random.uniform(0.001, 0.008))
        return f"{value}:done"

    builder = StreamsBuilder()
    (builder.stream(lines, Consumed.with_(S, S))
        .map_values_concurrently(slow_lookup, concurrency)
        .to(out, Produced.with_(S, S)))
    return builder.build()


def test_concurrent_steps_keep_every_record_once_and_in_key_order_across_a_killed_worker(
        broker, spark, topics, tmp_path):
    names = topics(lines=2, out=2)
    rng = random.Random(7)
    sequence = dict.fromkeys(KEYS, 0)
    records = []
    for _ in range(1600):
        key = rng.choice(KEYS)
        records.append((key, f"{key}-{sequence[key]}"))
        sequence[key] += 1
    app = SparkStreams(enrich(names["lines"], names["out"], concurrency=4), {
        "application.id": f"concurrent-eos-{names['lines']}", "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "execution.mode": "realtime",
        "commit.interval.ms": 100}, spark)
    app.start()
    writer = threading.Thread(target=produce_steadily,
                              args=(broker.bootstrap_servers, names["lines"], records, 6.0))
    try:
        assert wait_for(lambda: len(app.metadata_for_local_threads()) == 2, 120), "threads did not start"
        writer.start()
        assert wait_for(lambda: app.progress.records > 0, 60), "nothing committed before the kill"
        time.sleep(1.0)
        victim = app.metadata_for_local_threads()[0]
        os.kill(victim.pid, signal.SIGKILL)
        writer.join()
        assert app.wait_until_caught_up(180), f"lag {app.lag()}"
        assert victim.pid not in {t.pid for t in app.metadata_for_local_threads()}
    finally:
        if writer.is_alive():
            writer.join()
        app.stop()
    outputs = read_updates(broker.bootstrap_servers, names["out"], value_serde=S)
    expected = {key: [f"{key}-{n}:done" for n in range(count)] for key, count in sequence.items()}
    assert outputs == expected  # each record once (none lost in flight, none repeated), in key order
