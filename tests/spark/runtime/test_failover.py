"""Losing a Spark executor costs seconds, never a stall (issue 27), with the runtime's defaults.

A real standalone cluster of a master and two workers with one core each (``spark.cores.max=2``,
``spark.task.maxFailures=8``) runs the word count (a repartition step, a count store) under
exactly_once_v2 with the default batch duration, commit interval and thread count, while lines keep
arriving. Once the first batch is well under way, the worker running some of the stream tasks is
SIGKILLed with its executor and Python workers. Every stream task must commit again within 30 s of
the kill (measured outside the application: the committed offsets of each of its input partitions
move), a third worker started later must get stream tasks, and read_committed every word is counted
exactly once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from pathlib import Path

import pytest

from strom.kafka import clients
from support.spark_cluster import SparkCluster

from .cluster_wordcount import DEFAULTS, SteadyWriter, WordCountDriver, assert_counted_once, caught_up
from .conftest import produce_lines

# a cluster, Spark's start-up, a kill and a recovery each: minutes on a loaded 2-core machine
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(900)]

RESUME_WITHIN_S = 30.0
STANDBY = json.dumps({**json.loads(DEFAULTS), "num.standby.replicas": 1, "metrics.prometheus.port": 0})
TASKS = {"0_0", "0_1", "1_0", "1_1"}
ENDING = b"ending the batch early"
REPORTED_LATE = b"of an earlier batch reports ("
"""What the driver logs, and ignores, when a thread of an earlier batch reports (control.py): a zombie
thawed says its commit was fenced (FENCED) or its transaction lost (ABORTED)."""
"""What the driver logs when it ends a real-time batch before its duration (realtime.py)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One standalone cluster of one-core workers for the whole module: a test kills workers, not the
    master, and starts with the workers it needs (``use_workers``: the killed ones started again)."""
    with SparkCluster(tmp_path_factory.mktemp("cluster"), workers=2, cores_per_worker=1) as running:
        yield running


def lines_of(seed: int, count: int, words: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(words)]
    return [(f"k{i}", " ".join(rng.choices(vocabulary, k=rng.randint(1, 4)))) for i in range(count)]


def assert_resumed(driver: WordCountDriver, since: float, what: str) -> dict[tuple[str, int], float]:
    """Every partition committed again within ``RESUME_WITHIN_S`` of ``since``."""
    moved = driver.resumed_after(since, RESUME_WITHIN_S + 30)
    assert len(moved) == len(driver.partitions) and max(moved.values()) <= RESUME_WITHIN_S, (
        f"{what}: committed again after (s): {moved}\n{driver.logs()}")
    return moved


def _submitter(cluster: SparkCluster, bootstrap: str, tmp_path: Path):
    """``submit(kind, workers, first)``: the word count submitted as ``failover-<kind>-<random>`` with
    exactly ``workers`` running, on fresh topics of ``bootstrap`` into which ``first`` was produced."""

    def submitted(kind: str, workers: list[int], first: list[tuple[str, str]], mode: str = "realtime",
                  overrides: str = DEFAULTS, cores_max: int = 2) -> WordCountDriver:
        cluster.use_workers(workers)
        names = {alias: f"rt-{alias}-{uuid.uuid4().hex[:8]}" for alias in ("lines", "counts")}
        clients.create_topics(bootstrap, {name: 2 for name in names.values()})
        produce_lines(bootstrap, names["lines"], first)
        return WordCountDriver(cluster, bootstrap, names, tmp_path,
                               f"failover-{kind}-{uuid.uuid4().hex[:8]}", mode, overrides, cores_max)

    return submitted


@pytest.fixture
def submit(cluster, broker, tmp_path):
    return _submitter(cluster, broker.bootstrap_servers, tmp_path)


def both_used(driver: WordCountDriver, workers: range = range(2)) -> None:
    driver.wait_until(lambda: all(driver.tasks_on(i) for i in workers), 360,
                      f"stream tasks on workers {list(workers)}")


@pytest.mark.parametrize("mode", ["realtime", "microbatch"])
def test_a_lost_worker_costs_seconds_and_a_new_one_is_used(cluster, submit, broker, mode):
    lines = lines_of(27, 4000, 40)
    bootstrap = broker.bootstrap_servers
    with submit(mode, [0, 1], lines[:200], mode) as driver:
        names = driver.names
        both_used(driver)
        with SteadyWriter(bootstrap, names["lines"], lines[200:]):
            driver.all_committing(120)  # the batch (5 minutes by default) is under way on both workers
            cluster.kill_worker(0)
            moved = assert_resumed(driver, time.monotonic(), "after the kill")
            assert driver.tasks_on(0) <= driver.tasks_on(1), "the lost worker's tasks stayed"
            cluster.start_worker(2)
            used = driver.wait_until(lambda: bool(driver.tasks_on(2)), 300, "the third worker used")
        print(f"{mode}: committed again after the kill (s): "
              f"{ {f'{t}-{p}': round(s, 1) for (t, p), s in moved.items()} }; third worker used after "
              f"{used:.1f} s")
        driver.finish()
    assert_counted_once(bootstrap, names["counts"], lines)


def test_a_standby_replica_takes_over_a_lost_task_with_its_state_warm(cluster, submit, broker):
    """``num.standby.replicas=1``: each task's standby lives on the other worker, so when a worker dies
    its tasks reopen on the survivor replaying only what their standbys had not applied yet."""
    keys = 20_000
    state = [(f"s{i}", " ".join(f"u{5 * i + j}" for j in range(5))) for i in range(keys // 5)]
    steady = lines_of(28, 1500, 40)
    bootstrap = broker.bootstrap_servers
    with submit("standby", [0, 1], steady[:100], overrides=STANDBY) as driver:
        names = driver.names
        both_used(driver)
        produce_lines(bootstrap, names["lines"], state)
        driver.wait_until(lambda: caught_up(bootstrap, driver.app_id, driver.partitions), 240, "caught up")
        time.sleep(3.0)  # the standbys read the changelogs every half second
        with SteadyWriter(bootstrap, names["lines"], steady[100:]):
            driver.all_committing(60)
            cluster.kill_worker(0)
            moved = assert_resumed(driver, time.monotonic(), "after the kill")
        progress = driver.finish()
    restored = sum(progress["restored"].values())
    print(f"standby: committed again after the kill (s): {sorted(round(s, 1) for s in moved.values())}; "
          f"restored {restored} of {keys} keys; standbys {progress['standbys']}")
    assert progress["standbys"], "no standby reported"
    metrics = progress["metrics"]
    assert any(line.startswith("strom_standby_task_lag{") for line in metrics), metrics
    assert restored < keys // 10, f"restored {restored} changelog records: the standbys were not used"
    assert_counted_once(bootstrap, names["counts"], steady + state)


def test_two_workers_killed_one_after_the_other(cluster, submit, broker):
    """Three workers of one core; two of them SIGKILLed one after the other, each once every task
    commits again: the last one ends up running every task, each loss costing seconds, and every word
    is counted once."""
    lines = lines_of(29, 2000, 30)
    bootstrap = broker.bootstrap_servers
    with submit("twice", [0, 1, 2], lines[:100], cores_max=3) as driver:
        names = driver.names
        both_used(driver, range(3))
        with SteadyWriter(bootstrap, names["lines"], lines[100:]):
            driver.all_committing(120)
            resumed = []
            for victim in (0, 1):
                cluster.kill_worker(victim)
                moved = assert_resumed(driver, time.monotonic(), f"after killing worker {victim}")
                resumed.append(round(max(moved.values()), 1))
        print(f"two losses: every partition committed again after {resumed} s")
        driver.finish()
        assert driver.tasks_on(2) == TASKS
    assert_counted_once(bootstrap, names["counts"], lines)


def test_a_worker_killed_while_a_batch_ends(cluster, submit, broker):
    """The batch boundary: a third worker joins (``spark.cores.max=3``), so the driver ends the running
    batch to grow, and worker 0 is SIGKILLed the moment the driver says so, while the threads commit
    and park their tasks or the next batch starts: every task commits again within 30 s and every word is
    counted once."""
    lines = lines_of(30, 2000, 30)
    bootstrap = broker.bootstrap_servers
    with submit("boundary", [0, 1], lines[:100], cores_max=3) as driver:
        names = driver.names
        both_used(driver)
        with SteadyWriter(bootstrap, names["lines"], lines[100:]):
            driver.all_committing(120)
            seen = driver.log_path.stat().st_size
            cluster.start_worker(2)
            driver.wait_until(lambda: ENDING in driver.log_path.read_bytes()[seen:], 120,
                              "the batch ended for the third worker")
            cluster.kill_worker(0)
            moved = assert_resumed(driver, time.monotonic(), "after the kill at the batch's end")
        print(f"batch boundary: committed again after {max(moved.values()):.1f} s")
        driver.finish()
        assert driver.tasks_on(0) <= driver.tasks_on(1) | driver.tasks_on(2), "the lost worker's tasks stayed"
    assert_counted_once(bootstrap, names["counts"], lines)


def test_the_driver_restarted_while_a_worker_is_missing(cluster, submit, broker):
    """Worker 0 SIGKILLed, then the driver (spark-submit and its Python) before it recovered; the
    driver started again while worker 0 stays gone resumes on the remaining executor: every task
    commits again, all on worker 1, and read_committed every word is counted exactly once
    (exactly_once_v2: the dead attempts' open transactions are fenced and aborted)."""
    lines = lines_of(31, 2000, 30)
    bootstrap = broker.bootstrap_servers
    with submit("restart", [0, 1], lines[:100]) as driver:
        names = driver.names
        both_used(driver)
        with SteadyWriter(bootstrap, names["lines"], lines[100:]):
            driver.all_committing(120)
            cluster.kill_worker(0)
            driver.kill()
            driver.restart()
            restarted = time.monotonic()
            moved = driver.resumed_after(restarted, 240)
            assert len(moved) == len(driver.partitions), f"committed again after: {moved}\n{driver.logs()}"
        print(f"driver restarted: every partition committed again {max(moved.values()):.1f} s after")
        driver.finish()
        assert driver.tasks_on(1) == TASKS
    assert_counted_once(bootstrap, names["counts"], lines)


def _processes_of(cluster, worker: int) -> list[int]:
    """Every process of worker ``worker``: its JVM, its executors, their Python daemons and workers."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [pid for pid in pids if cluster.worker_of(pid) == worker]


@pytest.mark.parametrize("kafka", ["strom-broker", "apache-kafka"])
def test_a_frozen_executor_is_fenced_once_its_tasks_moved(cluster, tmp_path, request, kafka):
    """A zombie (issue 38): worker 0 with its executor and Python workers SIGSTOPped mid-batch. The driver
    hears nothing from its stream thread, ends the batch, fences the thread's slot and moves its tasks to
    worker 1, which commits them while worker 0 is still frozen. Thawed, the zombie's next commit is
    fenced: it ends quietly, and what it says over its old connection the driver logs and ignores (the
    application runs on); read_committed every word is counted exactly once. On strom broker and on the
    3-node Apache Kafka cluster (whose coordinator fences the zombie's epoch)."""
    brokers = request.getfixturevalue("broker" if kafka == "strom-broker" else "kafka_cluster")
    bootstrap = brokers.bootstrap_servers
    submit = _submitter(cluster, bootstrap, tmp_path)
    lines = lines_of(38, 3000, 30)
    with submit("frozen", [0, 1], lines[:100]) as driver:
        names = driver.names
        both_used(driver)
        with SteadyWriter(bootstrap, names["lines"], lines[100:]):
            driver.all_committing(120)
            frozen = _processes_of(cluster, 0)
            pythons = [pid for pid in frozen if "python" in Path(f"/proc/{pid}/comm").read_text()]
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            try:
                moved = driver.resumed_after(time.monotonic(), 120)
                assert len(moved) == len(driver.partitions), f"committed again: {moved}\n{driver.logs()}"
                # the Python workers first: thawed with its JVM, the executor would kill the zombie for
                # the cancelled Spark task before it commits
                for pid in pythons:
                    os.kill(pid, signal.SIGCONT)
                driver.wait_until(lambda: REPORTED_LATE in driver.log_path.read_bytes(), 90, "its fence")
            finally:
                for pid in frozen:
                    os.kill(pid, signal.SIGCONT)
        print(f"frozen executor: every partition committed again {max(moved.values()):.1f} s after the stop")
        driver.finish()
    assert_counted_once(bootstrap, names["counts"], lines)
