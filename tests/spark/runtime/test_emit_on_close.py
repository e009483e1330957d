"""EmitStrategy.on_window_close on Spark, exactly-once: every closed window is emitted once, also when
a micro-batch reopens its task in another Python worker (the close time emitted up to comes back from
the commit metadata)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.streams import (
    Consumed,
    EmitStrategy,
    Materialized,
    Produced,
    StreamsBuilder,
    TimeWindows,
    Topology,
    WindowedSerdes,
)
from support.kafka import read_topic

from .conftest import run_until_caught_up
from .wordcount import L, S

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

WINDOW_MS = 100
# a recent, window-aligned time: the broker may delete records older than the topic's retention (7 days)
# at any moment, and record time 0 would mean "now" to the producer
BASE = int(time.time() * 1000) // 100_000 * 100_000 - 1_000_000
WINDOWED = WindowedSerdes.time_windowed_serde_from(S, WINDOW_MS)


def final_counts(source: str, out: str) -> Topology:
    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_(S, S)).group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(WINDOW_MS))
        .emit_strategy(EmitStrategy.on_window_close())
        .count(materialized=Materialized.as_("final-counts").with_retention(1_000_000))
        .to_stream().to(out, Produced.with_(WINDOWED, L)))
    return builder.build()


def read_windows(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    out = []
    for message in read_topic(bootstrap, topic):
        window = WINDOWED.deserializer().deserialize(topic, message.key())
        out.append((window.key, window.window.start, L.deserializer().deserialize(topic, message.value())))
    return out


def test_each_closed_window_is_emitted_once_across_commits(broker, spark, topics, tmp_path, mode_props):
    names = topics(events=2, counts=2)
    keys = [f"k{i}" for i in range(6)]
    producer = clients.producer(broker.bootstrap_servers, **JAVA_PARTITIONER)
    for i in range(1200):  # windows [BASE, BASE + 100) .. [BASE + 1100, BASE + 1200)
        producer.produce(names["events"], b"v", keys[i % len(keys)].encode(), timestamp=BASE + i)
    assert producer.flush(30) == 0

    app = run_until_caught_up(spark, final_counts(names["events"], names["counts"]), broker, tmp_path,
                              f"rt-emit-{names['events']}", **{"commit.interval.ms": 100,
                                                               "max.offsets.per.trigger": 150, **mode_props})

    emitted = read_windows(broker.bootstrap_servers, names["counts"])
    # the last window is still open: stream time never passed its end
    expected = Counter((keys[i % len(keys)], BASE + i - i % WINDOW_MS) for i in range(1100))
    assert Counter((key, start) for key, start, _ in emitted) == dict.fromkeys(expected, 1)  # once each
    assert {(key, start): count for key, start, count in emitted} == dict(expected)
    commits = sum(task.commits for task in app.progress.tasks.values())
    assert commits >= 2 if app.realtime else app.progress.batches >= 5  # at most 150 per micro-batch
