"""Faults on a real Apache Kafka cluster while an exactly_once_v2 word count runs on Spark in real-time
mode and input keeps arriving; every count exact and no update written twice, read read_committed.

- the leader of an input partition is SIGKILLed (leadership moves to an in-sync follower), brought
  back, then the node coordinating a stream thread's transactions is SIGKILLed (the transaction
  coordinator fails over to another node, which aborts or completes the open transactions from
  ``__transaction_state``);
- one node is stopped (2 of 3 left: min.insync.replicas=2 still met) and a stream thread's Python
  worker is SIGKILLed mid-transaction;
- issue 38's campaign, with strom's defaults: nodes SIGKILLed in turn by role (an input leader, a
  thread slot's transaction coordinator, the group coordinator, a random node), each back after
  5-10 s; the application stays RUNNING and each kill's longest pause without a commit is printed;
- roles together: the one node that leads the input and coordinates both the group and a slot's
  transactions is SIGKILLed, then two nodes at once (docs/runtime.md, "Pauses after a node's death").

When a killed node was also the group coordinator of ``<application.id>``, librdkafka's
``send_offsets_to_transaction`` could wait for ever (librdkafka issues 5456, 5511) and the application
stalled: ``test_a_stalled_send_offsets_is_given_up_and_fenced`` reproduces that on one producer; strom's
transactional producer gives up after its bound (below the transaction timeout), the stream thread closes
its tasks without committing and opens them again from their last commit with a new producer of its slot.

The cluster is the module's own (the session one stays whole for the other tests).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from strom.errors import TransactionStalledError
from strom.kafka import clients
from strom.kafka.transactional import STALL_GRACE_S, TransactionalProducer
from strom.spark.runtime import SparkStreams
from strom.spark.runtime.thread import transactional_id
from support.apache_kafka import KafkaCluster
from support.kafka import read_topic

from .cluster_wordcount import SteadyWriter
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


def _start(cluster: KafkaCluster, spark, tmp_path, prefix: str, suffix: str | None = None, **props: Any
           ) -> tuple[SparkStreams, dict[str, str]]:
    """The word count in real-time mode under exactly_once_v2 (``commit.interval.ms`` 100 unless
    ``props`` say otherwise; ``commit_interval_ms=None`` leaves strom's default), application id
    ``<prefix>-<suffix>`` (a random suffix unless given)."""
    suffix = suffix or uuid.uuid4().hex[:8]
    names = {"lines": f"{prefix}-lines-{suffix}", "counts": f"{prefix}-counts-{suffix}"}
    clients.create_topics(cluster.bootstrap_servers, {names["lines"]: 2, names["counts"]: 2})
    settings = {"commit.interval.ms": 100, **{key.replace("_", "."): value for key, value in props.items()}}
    app = SparkStreams(word_count(names["lines"], names["counts"]), {
        "application.id": f"{prefix}-{suffix}", "bootstrap.servers": cluster.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "execution.mode": "realtime",
        **{key: value for key, value in settings.items() if value is not None}}, spark)
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
        coordinator = cluster.transaction_coordinator(transactional_id(app.config.application_id, 0))
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


def test_a_stalled_send_offsets_is_given_up_and_fenced(cluster):
    """The group coordinator's node is SIGKILLed and leaves the metadata (librdkafka decommissions it),
    then comes back: librdkafka's next send_offsets_to_transaction waits for ever for the stale
    coordinator. strom's producer gives up after its bound (4 s: it had found the coordinators before); a
    new producer of the same transactional.id fences it and aborts its transaction, and commits."""
    suffix = uuid.uuid4().hex[:8]
    topic, group, transactional_id = f"akf-stall-{suffix}", f"akf-stall-group-{suffix}", f"akf-stall-{suffix}"
    clients.create_topics(cluster.bootstrap_servers, {topic: 1})
    consumer = clients.consumer(cluster.bootstrap_servers, group)
    group_metadata = consumer.consumer_group_metadata()
    stalling = TransactionalProducer(cluster.bootstrap_servers, transactional_id, "The stalling producer")

    def transaction(producer: TransactionalProducer, value: bytes, offset: int) -> None:
        producer.begin_transaction()
        clients.produce(producer.producer, topic, value, b"k")
        producer.producer.flush(60)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], group_metadata)

    stalling.init_transactions()
    transaction(stalling, b"committed", 1)  # librdkafka caches the group coordinator
    stalling.commit_transaction()
    coordinator = cluster.group_coordinator(group)
    cluster.kill(coordinator)
    try:
        assert wait_for(lambda: coordinator not in stalling.producer.list_topics(timeout=10).brokers, 90)
        cluster.start_node(coordinator)
        stalling.commit_timeout_s = 10.0
        started = time.monotonic()
        with pytest.raises(TransactionStalledError, match="did not return in 4s"):  # coordinators known
            transaction(stalling, b"aborted", 2)
        assert time.monotonic() - started < stalling.commit_timeout_s + STALL_GRACE_S + 10
        assert stalling.stalled
    finally:
        if coordinator not in cluster.alive():
            cluster.start_node(coordinator)
    successor = TransactionalProducer(cluster.bootstrap_servers, transactional_id, "The successor")
    successor.init_transactions()  # fences the stalled producer and aborts its transaction
    transaction(successor, b"after", 3)
    successor.commit_transaction()
    committed = read_topic(cluster.bootstrap_servers, topic, expected=2)  # read_committed
    assert [record.value() for record in committed] == [b"committed", b"after"]
    consumer.close()


ROLES = ("input leader", "transaction coordinator", "group coordinator", "random node")
TRANSACTION_TIMEOUT_S = 60.0
"""librdkafka's ``transaction.timeout.ms``: a task pausing longer would have its transaction rolled back
by the coordinator (issue 38's target for the pause is 30 s; the test prints each)."""


class CommitWatch:
    """Every 0.1 s, in a thread of its own: the application's state and when each task's commit count
    rose (real-time progress moves at every commit of a task)."""

    def __init__(self, app: SparkStreams) -> None:
        self.app = app
        self.states: set[SparkStreams.State] = set()
        self.commits: dict[str, list[float]] = defaultdict(list)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        seen: dict[str, int] = {}
        while not self._stop.wait(0.1):
            self.states.add(self.app.state)
            for task, progress in list(self.app.progress.tasks.items()):
                if progress.commits != seen.get(task):
                    seen[task] = progress.commits
                    self.commits[task].append(time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def committed_since(self, since: float, times: int = 2) -> bool:
        """Every task committed ``times`` times since ``since``."""
        return bool(self.commits) and all(sum(t > since for t in c) >= times for c in self.commits.values())

    def longest_pause(self, since: float, until: float) -> float:
        """The longest any task went without a commit, from its last commit before ``since`` to ``until``
        (a commit a dying coordinator acknowledged just before ``since`` does not hide the stall after it)."""
        pauses = [0.0]
        for times in self.commits.values():
            points = [t for t in times if t <= since][-1:] + [t for t in times if since < t <= until]
            pauses += [b - a for a, b in itertools.pairwise(points)]
        return max(pauses)


def _victim(cluster: KafkaCluster, app: SparkStreams, names: dict[str, str], role: str, rng: random.Random
            ) -> int:
    if role == "input leader":
        return cluster.leader_of(names["lines"], rng.randrange(2))
    if role == "transaction coordinator":
        slots = sorted(int(t.thread_name.rsplit("-", 1)[1]) for t in app.metadata_for_local_threads()) or [0]
        return cluster.transaction_coordinator(transactional_id(app.config.application_id, rng.choice(slots)))
    if role == "group coordinator":
        return cluster.group_coordinator(app.config.application_id)
    return rng.choice(cluster.alive())


@pytest.mark.timeout(900)  # its own start on a busy machine included
def test_kafka_nodes_killed_in_turn_never_stop_the_application(cluster, spark, tmp_path):
    """Issue 38: with strom's defaults (exactly_once_v2, real-time), SIGKILL in turn an input
    partition's leader, a thread slot's transaction coordinator, the application's group coordinator and
    a random node, each started again after 5-10 s, the next kill once every task committed since and the
    node serves again (it boots while the application recovers): the
    application stays RUNNING throughout and the output is exact read_committed. The longest a task went
    without committing around each kill is printed (issue 38's target: below 30 s), with the batches the
    driver ran meanwhile (a thread whose transaction was aborted opens its tasks again itself: no new
    batch). One round per run: CI repeats it."""
    app, names = _start(cluster, spark, tmp_path, "akf-kills", commit_interval_ms=None)
    lines = _lines(3, 40 * 240)  # 40 a second for 4 minutes at most; what is left is written at the end
    rng = random.Random(38)
    watch = CommitWatch(app)
    report = []
    print("\nkilled | node | down s | longest a task went without a commit, s | batches ended meanwhile")
    try:
        with SteadyWriter(cluster.bootstrap_servers, names["lines"], lines, per_slice=10):
            quiet = time.monotonic()
            assert wait_for(lambda: watch.committed_since(quiet, 3), 120), "not committing before the kills"
            _row(report, "none (quiet)", "-", 0.0, watch.longest_pause(quiet, time.monotonic()), 0)
            for role in ROLES:
                down_s = rng.uniform(5.0, 10.0)
                _kill(cluster, app, watch, report, role,
                      lambda role=role: (_victim(cluster, app, names, role, rng),), down_s)
        assert app.wait_until_caught_up(240), f"lag {app.lag()}"
        assert watch.states == {SparkStreams.State.RUNNING}, watch.states
    finally:
        _end(cluster, app, watch)
    _assert_exact(cluster, names, lines)
    assert max(pause for *_, pause, _ in report) < TRANSACTION_TIMEOUT_S, report
    cluster.wait_until_serving(cluster.brokers)  # the last node killed is back for the module's next tests


def _kill(cluster: KafkaCluster, app: SparkStreams, watch: CommitWatch, report: list[tuple[Any, ...]],
          role: str, victims: Callable[[], tuple[int, ...]], down_s: float) -> None:
    """Once every node serves, SIGKILLs the ``victims()`` at once, starts them again after ``down_s`` (they
    boot while the application recovers), waits until every task committed since they serve again, and
    reports the longest pause without a commit; the application must still be RUNNING. The wait counts
    from the nodes' return to service, not from their start: a JVM took from 10 s to over 2 minutes to
    boot on a loaded 2-core machine, and with two nodes down nothing can commit before that."""
    cluster.wait_until_serving(cluster.brokers)
    nodes = victims()
    batches = app.progress.batches
    killed = time.monotonic()
    for node in nodes:
        cluster.kill(node)
    time.sleep(down_s)
    for node in nodes:
        cluster.start_node(node, wait=False)
    cluster.wait_until_serving(cluster.brokers)
    back = time.monotonic()
    assert wait_for(lambda: watch.committed_since(back, 1), 120), \
        f"{role} (nodes {nodes}) killed: not every task committed within 120 s of their return to service"
    _row(report, role, "+".join(map(str, nodes)), down_s, watch.longest_pause(killed, time.monotonic()),
         app.progress.batches - batches)
    assert app.state is SparkStreams.State.RUNNING, f"{role} (nodes {nodes}): {app.state}"


def _end(cluster: KafkaCluster, app: SparkStreams, watch: CommitWatch) -> None:
    watch.stop()
    app.stop()
    for node in set(range(cluster.brokers)) - set(cluster.alive()):
        cluster.start_node(node, wait=False)


def _row(report: list[tuple[Any, ...]], *row: Any) -> None:
    """A kill's figures, printed at once (a run cut short still shows those it measured)."""
    report.append(row)
    role, node, down, pause, ended = row
    print(f"{role} | {node} | {down:.1f} | {pause:.1f} | {ended}", flush=True)


def _one_node_coordinating(cluster: KafkaCluster, prefix: str) -> tuple[str, int]:
    """A suffix for ``_start`` whose application's group coordinator also coordinates stream thread slot
    0's transactions, and that node (a third of the ids qualify on 3 nodes)."""
    for _ in range(100):
        suffix = uuid.uuid4().hex[:8]
        app_id = f"{prefix}-{suffix}"
        node = cluster.group_coordinator(app_id)
        if cluster.transaction_coordinator(transactional_id(app_id, 0)) == node:
            return suffix, node
    raise AssertionError("no application id whose two coordinators are one node")


@pytest.mark.timeout(600)
def test_kafka_nodes_holding_several_roles_killed_at_once_never_stop_the_application(cluster, spark,
                                                                                    tmp_path):
    """Issue 38, roles together: one SIGKILL takes out the node that leads both input partitions and is at
    once the application's group coordinator and stream thread slot 0's transaction coordinator; then two
    nodes are SIGKILLed at the same moment (writes need 2 in sync and the KRaft quorum 2 of 3: the
    application stalls until they are back, it must not fail). Each back after a few seconds; the
    application stays RUNNING, every task commits again, the output is exact read_committed."""
    suffix, node = _one_node_coordinating(cluster, "akf-roles")
    others = [n for n in range(cluster.brokers) if n != node]
    lines_topic = f"akf-roles-lines-{suffix}"
    admin = cluster.admin()  # kept until the topic is created
    admin.create_topics([NewTopic(lines_topic, 2, replica_assignment=[
        [node, *others], [node, *reversed(others)]])])[lines_topic].result(30)
    app, names = _start(cluster, spark, tmp_path, "akf-roles", suffix, commit_interval_ms=None)
    assert {cluster.leader_of(lines_topic, p) for p in range(2)} == {node}
    lines = _lines(4, 40 * 120)
    watch = CommitWatch(app)
    report: list[tuple[Any, ...]] = []
    print("\nkilled | node | down s | longest a task went without a commit, s | batches ended meanwhile")
    try:
        with SteadyWriter(cluster.bootstrap_servers, names["lines"], lines, per_slice=10):
            started = time.monotonic()
            assert wait_for(lambda: watch.committed_since(started, 3), 120), "not committing before the kills"
            _kill(cluster, app, watch, report, "input leader + group + transaction coordinator",
                  lambda: (node,), 6.0)
            _kill(cluster, app, watch, report, "two nodes at once", lambda: tuple(others), 8.0)
        assert app.wait_until_caught_up(240), f"lag {app.lag()}"
        assert watch.states == {SparkStreams.State.RUNNING}, watch.states
    finally:
        _end(cluster, app, watch)
    _assert_exact(cluster, names, lines)
    cluster.wait_until_serving(cluster.brokers)
