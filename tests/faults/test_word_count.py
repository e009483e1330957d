"""Scenarios 1-6 of issue 39: network faults while the exactly_once_v2 word count runs on Spark with
every component on a host of its own (``topology.py``). One application runs through the module's
scenarios (each in turn: input flows, the fault, the heal); after each, every count is exact and no
update was written twice (read_committed, over everything written so far), and the application caught
up within 60 s of the heal."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.hosts import pause, resume

from .topology import Topology, WordCountRun

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

SILENT_S = 10.0
"""strom.spark.runtime.control.SILENT_S: a stream thread the driver has not heard from this long is lost."""
STOP_GRACE_S = 30.0
"""strom.spark.runtime.realtime._STOP_GRACE_S: after ending a batch early, how long the driver waits for
its Spark job before cancelling what is left (a lost thread's Spark task that does not end)."""


@pytest.fixture(scope="module")
def word_count(topology: Topology, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WordCountRun]:
    run = WordCountRun(topology, tmp_path_factory.mktemp("word-count"))
    try:
        yield run
        run.close()
    finally:
        run.driver.kill()


@pytest.fixture(autouse=True)
def _healed(topology: Topology) -> Iterator[None]:
    yield
    topology.network.heal()


def test_every_link_slow_and_lossy_for_a_minute(topology, word_count):
    """Scenario 5: every packet every host sends waits 200 ms +- 100 ms, and 5 % are lost, for 60 s."""
    def slow(driver):
        for host in topology.network.hosts.values():
            topology.network.delay(host, 200, jitter_ms=100)
            topology.network.loss(host, 5)
        time.sleep(60)
        topology.network.heal()

    word_count.scenario("slow and lossy links", slow)


def test_the_kafka_node_leading_the_input_isolated(topology, word_count):
    """Scenario 3: the node leading input partition 0 (and coordinating whatever transactions and
    groups it does) is cut off from everything for 30 s: leadership moves; with acks=all and
    min.insync.replicas 2 it cannot acknowledge alone, so nothing it took is lost."""
    def isolate_leader(driver):
        leader = topology.kafka.leader_of(driver.names["lines"], 0)
        topology.network.isolate(topology.host(f"kafka-{leader}"))
        time.sleep(30)
        topology.network.heal()

    word_count.scenario("input leader isolated", isolate_leader)


def test_an_executor_cut_off_from_kafka_but_not_from_the_driver(topology, word_count):
    """Scenario 2: worker-0 reaches the driver but no Kafka node for 30 s: its stream thread cannot
    commit; its transactions time out and abort; healed, it carries on exactly once."""
    def cut(driver):
        for node in range(3):
            topology.network.partition(topology.host("worker-0"), topology.host(f"kafka-{node}"))
        time.sleep(30)
        topology.network.heal()

    word_count.scenario("executor cut from Kafka", cut)


def test_an_executor_cut_off_from_the_driver_but_not_from_kafka(topology, word_count):
    """Scenario 1, the zombie: worker-0 (its executor and Python workers) cannot reach the driver for
    2.5 times the driver's loss detection, but still reaches Kafka; its tasks move to worker-1, and it
    must not commit again (the new owner's transactions fence its transactional ids)."""
    def cut(driver):
        topology.network.partition(topology.host("worker-0"), topology.host("driver"))
        moved = driver.resumed_after(time.monotonic(), 2.5 * SILENT_S)
        assert len(moved) == len(driver.partitions), f"partitions that moved on: {moved}\n{driver.logs()}"
        topology.network.heal()

    word_count.scenario("executor cut from the driver", cut)


def test_a_python_worker_paused_for_a_minute(word_count):
    """Scenario 6: the Python worker holding worker-0's tasks is frozen (SIGSTOP) for 60 s, as in a long
    GC or VM pause. Its connection to the driver stays open but silent: after ``SILENT_S`` the driver
    ends the batch early, and ``STOP_GRACE_S`` later cancels the frozen thread's Spark task; the next
    batch opens its tasks elsewhere. Resumed, it still believes it owns them and must not commit again."""
    def freeze(driver):
        holder = task_holder(driver, 0)
        pause(holder)
        try:
            moved = driver.resumed_after(time.monotonic(), SILENT_S + STOP_GRACE_S + 15)
            assert len(moved) == len(driver.partitions), f"moved on: {moved}\n{driver.logs()}"
            print(f"tasks of the paused worker moved after {max(moved.values()):.1f} s")
            time.sleep(max(0.0, 60 - max(moved.values())))
        finally:
            resume(holder)

    word_count.scenario("Python worker paused", freeze)


def task_holder(driver, worker: int) -> int:
    """The pid of a Python worker holding a task open on ``worker`` (its flock on the task's ``owner``
    file, as /proc/locks lists it)."""
    owners = set()
    state = driver.cluster.worker_dir(worker) / "state" / driver.app_id
    for task in driver.tasks_on(worker):
        with contextlib.suppress(OSError):
            owners.add((state / task / "owner").stat().st_ino)
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "FLOCK" and int(fields[5].rsplit(":", 1)[1]) in owners:
            return int(fields[4])
    raise AssertionError(f"no process holds a task of worker {worker}: {driver.tasks_on(worker)}")


def test_the_driver_isolated_for_30_s(topology, word_count):
    """Scenario 4: the driver reaches nothing (Kafka, master, executors) for 30 s, then comes back."""
    def isolate_driver(driver):
        topology.network.isolate(topology.host("driver"))
        time.sleep(30)
        topology.network.heal()

    word_count.scenario("driver isolated", isolate_driver)
