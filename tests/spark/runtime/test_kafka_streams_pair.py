"""Kafka Streams and strom side by side on the Apache Kafka cluster (issue 28's end-to-end pair).

One application, a repartition step, a windowed count with ``suppress(until_window_closes)`` and a
table-table join, runs as a Kafka Streams 4.1.1 application (tests/oracle/java's ``PageViews``,
exactly_once_v2) and as strom on Spark (real-time mode, exactly_once_v2, the defaults otherwise), both
reading the same input topics: each output topic's final value per key must be the same, and each
closed window's count is emitted once by either.

Input arrives in two phases so that both results are determined by the input alone: the clicks (within
200 s of event time, far inside the windows' hour of grace), then, once both applications have
processed all of them, one click per page two hours later, which closes every earlier window in each
partition of the repartition topic.
"""

from __future__ import annotations

import random
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from oracle.java_oracle import oracle_dir
from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.spark.runtime import SparkStreams
from strom.streams import (
    BufferConfig,
    Consumed,
    Grouped,
    Materialized,
    Produced,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    Topology,
)
from support.kafka import Record, produce

from .conftest import read_updates, wait_for
from .wordcount import L, S

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

WINDOW_MS, GRACE_MS = 10_000, 3_600_000  # PageViews.WINDOW, PageViews.GRACE
USERS = [f"u{i}" for i in range(10)]
PAGES = [f"p{i}" for i in range(6)]
TOPICS = ("clicks", "users", "java-page-counts", "java-user-regions", "strom-page-counts",
          "strom-user-regions")


def page_views(clicks: str, users: str, page_counts: str, user_regions: str) -> Topology:
    """PageViews.java's topology in strom's DSL."""
    builder = StreamsBuilder()
    stream = builder.stream(clicks, Consumed.with_(S, S))
    (stream.group_by(lambda user, page: page, Grouped.as_("pages").with_key_serde(S).with_value_serde(S))
        .windowed_by(TimeWindows.of_size_and_grace(WINDOW_MS, GRACE_MS))
        .count(materialized=Materialized.as_("page-counts"))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream(lambda window, count: f"{window.key}@{window.window.start}")
        .to(page_counts, Produced.with_(S, L)))
    per_user = stream.group_by_key().count(materialized=Materialized.as_("user-counts"))
    regions = builder.table(users, Consumed.with_(S, S), Materialized.as_("users"))
    (per_user.join(regions, lambda count, region: f"{region}:{count}")
        .to_stream()
        .to(user_regions, Produced.with_(S, S)))
    return builder.build()


def kafka_streams(bootstrap: str, app_id: str, state_dir: Path, names: dict[str, str],
                  log: Path) -> subprocess.Popen:
    """PageViews on the JVM, running until its stdin closes."""
    classpath = f"{oracle_dir() / 'classes'}:{oracle_dir() / 'libs'}/*"
    process = subprocess.Popen(
        ["java", "-cp", classpath, "dev.strom.oracle.PageViews", bootstrap, app_id, str(state_dir),
         names["clicks"], names["users"], names["java-page-counts"], names["java-user-regions"]],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("wb"), text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "started", log.read_text()
    return process


def finals(bootstrap: str, topic: str, serde=L) -> dict[str, object]:
    return {key: seen[-1] for key, seen in read_updates(bootstrap, topic, 30, serde).items()}


def test_kafka_streams_and_strom_give_the_same_final_values(kafka_cluster, spark, tmp_path):
    bootstrap = kafka_cluster.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    names = {alias: f"pair-{alias}-{suffix}" for alias in TOPICS}
    clients.create_topics(bootstrap, dict.fromkeys(names.values(), 2))
    rng = random.Random(suffix)
    # three hours back: Kafka 4 refuses timestamps over an hour ahead (log.message.timestamp.after.max.ms)
    start = (int(time.time() * 1000) - 3 * GRACE_MS) // WINDOW_MS * WINDOW_MS
    clicks = [(rng.choice(USERS), rng.choice(PAGES), start + i * 500) for i in range(400)]
    regions = {user: rng.choice(["eu", "us", "apac"]) for user in USERS}
    produce(bootstrap, names["users"], list(regions.items()), **JAVA_PARTITIONER)
    produce(bootstrap, names["clicks"], [Record(user, page, timestamp=ts) for user, page, ts in clicks],
            **JAVA_PARTITIONER)

    java = kafka_streams(bootstrap, f"pair-java-{suffix}", tmp_path / "java", names, tmp_path / "java.log")
    app = SparkStreams(page_views(names["clicks"], names["users"], names["strom-page-counts"],
                                  names["strom-user-regions"]),
                       {"application.id": f"pair-strom-{suffix}", "bootstrap.servers": bootstrap,
                        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path / "strom")},
                       spark)
    app.start()
    try:
        def joined(clicked: Counter[str]) -> bool:
            expected = {user: f"{regions[user]}:{clicked[user]}" for user in clicked}
            return all(finals(bootstrap, names[f"{side}-user-regions"], S) == expected
                       for side in ("java", "strom"))

        clicked = Counter(user for user, _, _ in clicks)
        assert wait_for(lambda: joined(clicked), 240), (finals(bootstrap, names["java-user-regions"], S),
                                                         finals(bootstrap, names["strom-user-regions"], S))
        late = start + 2 * GRACE_MS  # closes every window of the first phase, in every repartition partition
        produce(bootstrap, names["clicks"], [Record("u0", page, timestamp=late) for page in PAGES],
                **JAVA_PARTITIONER)
        clicked["u0"] += len(PAGES)
        windows = {f"{page}@{ts - ts % WINDOW_MS}" for _, page, ts in clicks}

        def closed() -> bool:
            return all(set(finals(bootstrap, names[f"{side}-page-counts"])) == windows
                       for side in ("java", "strom"))

        assert wait_for(lambda: joined(clicked) and closed(), 240), {
            side: len(finals(bootstrap, names[f"{side}-page-counts"])) for side in ("java", "strom")}
    finally:
        app.stop()
        assert java.stdin is not None
        java.stdin.close()
        java.wait(90)

    java_counts = read_updates(bootstrap, names["java-page-counts"])
    strom_counts = read_updates(bootstrap, names["strom-page-counts"])
    assert {k: v[-1] for k, v in strom_counts.items()} == {k: v[-1] for k, v in java_counts.items()}
    assert sum(v[-1] for v in strom_counts.values()) == len(clicks)
    assert all(len(seen) == 1 for seen in java_counts.values()), "Kafka Streams emitted a window twice"
    assert all(len(seen) == 1 for seen in strom_counts.values()), "strom emitted a window twice"
    regions_of = {side: finals(bootstrap, names[f"{side}-user-regions"], S) for side in ("java", "strom")}
    assert regions_of["strom"] == regions_of["java"]
