"""Faults on a real Apache Kafka cluster while an exactly_once_v2 word count runs on Spark in real-time
mode and input keeps arriving; every count exact and no update written twice, read read_committed.

- the leader of an input partition is SIGKILLed (leadership moves to an in-sync follower), brought back,
  then the node coordinating a task's transactions is SIGKILLed (the transaction coordinator fails over
  to another node, which aborts or completes the open transactions from ``__transaction_state``);
- one node is stopped (2 of 3 left: min.insync.replicas=2 still met) and a stream thread's Python
  worker is SIGKILLed mid-transaction.

The cluster is the module's own (the session one stays whole for the other tests).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from strom.kafka import clients
from strom.spark.runtime import SparkStreams
from support.apache_kafka import KafkaCluster

from .conftest import produce_steadily, read_updates, wait_for
from .wordcount import word_count

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]  # a Kafka cluster starts too


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path_factory.mktemp("kafka-faults"), brokers=3) as running:
        yield running


def _lines(seed: int, n: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(12)]
    return [(f"k{i}", " ".join(rng.choices(words, k=rng.randint(1, 4)))) for i in range(n)]


def _start(cluster: KafkaCluster, spark, tmp_path, prefix: str) -> tuple[SparkStreams, dict[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    names = {"lines": f"{prefix}-lines-{suffix}", "counts": f"{prefix}-counts-{suffix}"}
    clients.create_topics(cluster.bootstrap_servers, {names["lines"]: 2, names["counts"]: 2})
    app = SparkStreams(word_count(names["lines"], names["counts"]), {
        "application.id": f"{prefix}-{suffix}", "bootstrap.servers": cluster.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path),
        "execution.mode": "realtime", "commit.interval.ms": 100}, spark)
    app.start()
    assert wait_for(lambda: app.progress.last_commit is not None, 180), "no commit"
    return app, names


def _assert_exact(cluster: KafkaCluster, names: dict[str, str], lines: list[tuple[str, str]]) -> None:
    updates = read_updates(cluster.bootstrap_servers, names["counts"], timeout=120)
    assert {word: seen[-1] for word, seen in updates.items()} == dict(
        Counter(w for _, line in lines for w in line.split()))
    for word, seen in updates.items():
        assert seen == sorted(set(seen)), f"{word}: an update was written twice: {seen}"


def _writing(cluster: KafkaCluster, topic: str, lines: list[tuple[str, str]],
             seconds: float) -> threading.Thread:
    writer = threading.Thread(target=produce_steadily,
                              args=(cluster.bootstrap_servers, topic, lines, seconds))
    writer.start()
    return writer


@pytest.mark.xfail(reason="known bug, issue 26: after the transaction coordinator's node is SIGKILLed the "
                   "application stalls (lag stays ~3,000 for 240 s; seen twice on 2026-11-28, passed twice "
                   "earlier); not fixed yet", strict=False)
def test_the_input_leader_then_the_transaction_coordinator_killed(cluster, spark, tmp_path):
    app, names = _start(cluster, spark, tmp_path, "akf-leader")
    lines = _lines(1, 2400)
    writer = _writing(cluster, names["lines"], lines, 24.0)
    try:
        time.sleep(4.0)
        leader = cluster.leader_of(names["lines"], 0)
        cluster.kill(leader)
        time.sleep(4.0)
        cluster.start_node(leader)
        coordinator = cluster.transaction_coordinator(f"{app.config.application_id}-1_0")
        cluster.kill(coordinator)
        time.sleep(4.0)
        cluster.start_node(coordinator)
        writer.join()
        assert app.wait_until_caught_up(240), f"lag {app.lag()}"
        assert app.state is SparkStreams.State.RUNNING
    finally:
        writer.join()
        app.stop()
        for node in set(range(cluster.brokers)) - set(cluster.alive()):
            cluster.start_node(node)
    _assert_exact(cluster, names, lines)


def test_a_python_worker_killed_while_the_cluster_is_one_node_short(cluster, spark, tmp_path):
    app, names = _start(cluster, spark, tmp_path, "akf-short")
    lines = _lines(2, 1200)
    stopped = 2
    cluster.stop_node(stopped)
    writer = _writing(cluster, names["lines"], lines, 8.0)
    try:
        assert wait_for(lambda: len(app.metadata_for_local_threads()) >= 1, 60), "no stream thread"
        time.sleep(3.0)
        victim = app.metadata_for_local_threads()[0]
        os.kill(victim.pid, signal.SIGKILL)
        writer.join()
        assert app.wait_until_caught_up(240), f"lag {app.lag()}"
        assert victim.pid not in {t.pid for t in app.metadata_for_local_threads()}
    finally:
        writer.join()
        app.stop()
        cluster.start_node(stopped)
    _assert_exact(cluster, names, lines)
