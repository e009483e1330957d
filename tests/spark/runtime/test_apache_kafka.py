"""SparkStreams on the 3-node Apache Kafka cluster (KRaft, RF 3, min.insync.replicas 2, Kafka's defaults):
both execution modes under exactly_once_v2 and at_least_once, on a topology with a global table join, a
repartition topic and a changelogged count store; its internal topics created with replication.factor
-1 (the cluster's default, 3) or 3; the counts read read_committed, the stores queried, ``lag()`` at 0.

The same topologies run on strom broker in the neighbouring modules (test_runtime.py,
test_global_table.py, test_interactive_queries.py); what this adds is Kafka itself on the other end:
transactions v2, coordinators and leaders on different nodes, replicated internal topics.
"""

from __future__ import annotations

import random
import uuid

import pytest

from strom.kafka import clients
from strom.spark.runtime import SparkStreams
from strom.streams import (
    Consumed,
    Grouped,
    Materialized,
    Produced,
    QueryableStoreTypes,
    StoreQueryParameters,
    StreamsBuilder,
    Topology,
    TopologyTestDriver,
)

from .conftest import produce_lines, read_updates, wait_for
from .wordcount import L, S

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]  # a Kafka cluster starts too

WORDS = [f"w{i}" for i in range(15)]
KV = QueryableStoreTypes.key_value_store()


def words_by_known_users(lines: str, users: str, counts: str) -> Topology:
    """Lines keyed by user, kept when the global users table knows the user (a global table join), split
    into words, re-keyed by word (repartition topic) and counted (RocksDB store with a changelog)."""
    builder = StreamsBuilder()
    known = builder.global_table(users, Consumed.with_(S, S), Materialized.as_("users"))
    (builder.stream(lines, Consumed.with_(S, S))
        .join(known, lambda user, line: user, lambda line, name: line)
        .flat_map_values(str.split)
        .group_by(lambda user, word: word, Grouped.as_("words").with_key_serde(S).with_value_serde(S))
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to(counts, Produced.with_(S, L)))
    return builder.build()


def _expected(names: dict[str, str], users: list, lines: list) -> tuple[dict[str, int], dict[str, str]]:
    with TopologyTestDriver(words_by_known_users(names["lines"], names["users"], names["counts"])) as driver:
        driver.create_input_topic(names["users"], S, S).pipe_record_list(users)
        driver.create_input_topic(names["lines"], S, S).pipe_record_list(lines)
        return (dict(driver.get_key_value_store("counts").all()),
                dict(driver.get_key_value_store("users").all()))


def _replication(bootstrap: str, topics: list[str]) -> dict[str, set[int]]:
    """Replicas per partition of each topic, as the cluster's metadata lists them."""
    metadata = clients.admin(bootstrap).list_topics(timeout=30).topics
    return {t: {len(p.replicas) for p in metadata[t].partitions.values()} for t in topics}


@pytest.mark.parametrize(("mode", "guarantee", "replication"), [
    ("realtime", "exactly_once_v2", -1),
    ("microbatch", "exactly_once_v2", 3),
    ("realtime", "at_least_once", 3),
    ("microbatch", "at_least_once", -1),
])
def test_a_topology_with_global_table_repartition_and_store_on_apache_kafka(
        kafka_cluster, spark, tmp_path, mode, guarantee, replication):
    bootstrap = kafka_cluster.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    names = {alias: f"ak-{alias}-{suffix}" for alias in ("lines", "users", "counts")}
    clients.create_topics(bootstrap, {names["lines"]: 2, names["users"]: 2, names["counts"]: 2})
    rng = random.Random(suffix)
    users = [(f"u{i}", f"name-{i}") for i in range(8)]  # u8, u9 write lines but are not known
    lines = [(f"u{rng.randrange(10)}", " ".join(rng.choices(WORDS, k=rng.randint(1, 5)))) for _ in range(300)]
    produce_lines(bootstrap, names["users"], users)
    produce_lines(bootstrap, names["lines"], lines[:200])

    app_id = f"ak-{mode}-{guarantee}-{suffix}"
    mode_props = ({"execution.mode": "realtime", "realtime.batch.duration.ms": 4000} if mode == "realtime"
                  else {"execution.mode": "microbatch", "max.offsets.per.trigger": 200})
    app = SparkStreams(words_by_known_users(names["lines"], names["users"], names["counts"]), {
        "application.id": app_id, "bootstrap.servers": bootstrap, "processing.guarantee": guarantee,
        "state.dir": str(tmp_path), "commit.interval.ms": 200, "replication.factor": replication,
        **mode_props}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(180), f"lag {app.lag()}"
        produce_lines(bootstrap, names["lines"], lines[200:])  # input that arrives while it runs
        assert app.wait_until_caught_up(180), f"lag {app.lag()}"
        assert app.lag() == 0
        counts, known = _expected(names, users, lines)
        queried = app.store(StoreQueryParameters.from_name("counts", KV))
        assert wait_for(lambda: dict(queried.all()) == counts, 30), dict(queried.all())
        assert dict(app.store(StoreQueryParameters.from_name("users", KV)).all()) == known
    finally:
        app.stop()

    assert 0 < sum(counts.values()) < sum(len(line.split()) for _, line in lines)  # the join dropped some
    updates = read_updates(bootstrap, names["counts"])
    assert {word: seen[-1] for word, seen in updates.items()} == counts
    if guarantee == "exactly_once_v2":
        for word, seen in updates.items():
            assert seen == sorted(set(seen)), f"{word}: an update was written twice: {seen}"
    internal = [f"{app_id}-words-repartition", f"{app_id}-counts-changelog"]
    assert _replication(bootstrap, internal) == {topic: {3} for topic in internal}

