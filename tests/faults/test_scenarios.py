"""Scenarios 1-7 of issue 39: network faults while the exactly_once_v2 word count runs on Spark with
every component on a host of its own (``topology.py``), and ``strom.tasks`` beside it under the same
faults (``tasks_run.py``). One word count application and one pair of subscription processes run
through the module's scenarios, each in turn: input flows, the fault, the heal. Each scenario runs with
two timings: held past the detection it is about (a loss declared, a leadership moved, a session
expired), and short of it (a blip the components must ride out). After each, every count is exact and
no update was written twice (read_committed, over everything written so far), and both applications
caught up within 60 s of the heal; the last test checks the subscription's records over every fault."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from strom.cli.main import cli
from strom.spark.runtime.thread import transactional_id
from support.hosts import pause, resume

from .tasks_run import TasksRun, cut_from_its_group_coordinator
from .topology import WORKERS, Topology, WordCountRun

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

SILENT_S = 10.0
"""strom.spark.runtime.control.SILENT_S: a stream thread the driver has not heard from this long is lost."""
STOP_GRACE_S = 30.0
"""strom.spark.runtime.realtime._STOP_GRACE_S: after ending a batch early, how long the driver waits for
its Spark job before cancelling what is left (a lost thread's Spark task that does not end)."""
PAUSE_S = 60.0
"""Scenario 6's pause: the issue's figure."""
SHORT_S = 5.0
"""The short timing: below SILENT_S, below Kafka's ``broker.session.timeout.ms`` (9 s) and the
subscription's session timeout (10 s)."""


@pytest.fixture
def scenario(word_count: WordCountRun, tasks: TasksRun):
    """``scenario(name, fault)``: the word count's scenario, the subscription's recovery measured too."""
    tasks.wait_until_processing()
    return lambda name, fault: word_count.scenario(name, fault,
                                                   also={"strom.tasks": tasks.caught_up_condition})


@pytest.fixture(autouse=True)
def _healed(topology: Topology) -> Iterator[None]:
    yield
    topology.network.heal()


@pytest.mark.parametrize(("hold_s", "delay_ms", "jitter_ms"), [(60, 200, 100), (20, 300, 200)],
                         ids=["60s-200ms", "20s-300ms"])
def test_every_link_slow_and_lossy(topology, scenario, hold_s, delay_ms, jitter_ms):
    """Scenario 5: every packet every host sends waits ``delay_ms`` +- ``jitter_ms`` and 5 % are lost,
    for a minute (the issue's figures), and for 20 s with longer delays."""
    def slow_and_lossy(host):
        topology.network.delay(host, delay_ms, jitter_ms=jitter_ms)
        topology.network.loss(host, 5)

    def slow(driver):
        hosts = list(topology.network.hosts.values())
        with ThreadPoolExecutor(len(hosts)) as making:  # every link at once (a delayer is a process each)
            list(making.map(slow_and_lossy, hosts))
        time.sleep(hold_s)
        topology.network.heal()

    scenario(f"slow and lossy links, {hold_s} s", slow)


@pytest.mark.parametrize("held", [True, False], ids=["until-moved", "5s"])
def test_the_kafka_node_leading_the_input_and_coordinating_transactions_cut_off_from_the_other_two(
        topology, word_count, scenario, held):
    """Scenario 3: the node that leads both input partitions and coordinates every transaction of the
    application (``topology.INTERNAL_TOPICS``; its leaderships elected back first) is cut off from the
    other two nodes, not from its clients: the input's producer and the stream threads still reach it,
    and it goes on believing it leads. Held until the other two moved its leaderships away (the
    controllers fenced it: ``broker.session.timeout.ms``, 9 s; waited up to 120 s, as a `make test` at load
    200 on 2 cores saw Kafka take more than 60 s), or for ``SHORT_S``. With acks=all and
    min.insync.replicas 2 it can acknowledge nothing alone, so nothing acknowledged is lost: every line
    written counts as written once it was acknowledged, and every count must be exact."""
    partitions = word_count.input_partitions()
    node = word_count.input_leader
    others = [other for other in range(topology.kafka.brokers) if other != node]

    def cut_from_the_others(driver):
        topology.lead(partitions, node, 60)
        for other in others:
            topology.network.partition(topology.host(f"kafka-{node}"), topology.host(f"kafka-{other}"))
        if held:
            moved = driver.wait_until(lambda: all(moved_away(topology.leaders(partitions, other), node)
                                                  for other in others),
                                      120, f"the other nodes moved kafka-{node}'s leaderships")
            print(f"kafka-{node}'s leaderships moved {moved:.1f} s after the cut; kafka-{node} then knew the "
                  f"leaders of {[f'{tp.topic}-{tp.partition}' for tp in partitions]} as "
                  f"{topology.leaders(partitions, node)}")
        else:
            time.sleep(SHORT_S)
        topology.network.heal()

    scenario(f"input leader and transaction coordinator cut from the other nodes{'' if held else ', 5 s'}",
             cut_from_the_others)


def moved_away(leaders: list[int], node: int) -> bool:
    """Every partition led, and by another node than ``node``."""
    return -1 not in leaders and node not in leaders


@pytest.mark.parametrize("hold_s", [30, 8], ids=["30s", "8s"])
def test_an_executor_cut_off_from_kafka_but_not_from_the_driver(topology, scenario, hold_s):
    """Scenario 2: worker-0 reaches the driver but no Kafka node: for 30 s its stream thread cannot
    commit (its transaction given up and aborted, the thread ends, its tasks reopen); for 8 s its
    requests only wait. Healed, it carries on exactly once."""
    def cut(driver):
        for node in range(3):
            topology.network.partition(topology.host("worker-0"), topology.host(f"kafka-{node}"))
        time.sleep(hold_s)
        topology.network.heal()

    scenario(f"executor cut from Kafka, {hold_s} s", cut)


def test_an_executor_cut_off_from_the_driver_but_not_from_kafka(topology, tasks, scenario):
    """Scenario 1, the zombie, healed as soon as the driver declared worker-0's stream thread lost:
    worker-0 (its executor and Python workers) cannot reach the driver but still reaches Kafka; the
    thread, which never hears of the loss, goes on consuming and committing while the driver ends the
    batch. Healed, the counts must be exact: whatever the zombie committed was committed once, and
    nothing it did after a fence is visible. Meanwhile the subscription's tasks-0 is cut off from its
    group coordinator (for as long: past its session timeout, so it is expelled)."""
    def cut(driver):
        lost = lost_threads(driver)
        topology.network.partition(topology.host("worker-0"), topology.host("driver"))
        cut_from_its_group_coordinator(tasks)
        driver.wait_until(lambda: lost_threads(driver) > lost, 2.5 * SILENT_S, "worker-0's thread lost")
        topology.network.heal()

    scenario("executor cut from the driver, healed once declared lost", cut)


def test_while_an_executor_is_cut_off_from_the_driver_the_others_carry_on(topology, tasks, scenario):
    """Scenario 1, held: while worker-0 stays cut off from the driver (but not from Kafka), once its
    thread is declared lost and its Spark task given up (``SILENT_S`` + ``STOP_GRACE_S``), a batch must
    run without it, every task open on worker-1 and committing, without ending early again and again.
    (Found by this test: the silent connection of an earlier batch's thread named it lost in every new
    batch, which ended 1-2 s after it started; issue 38's driver drops earlier batches' connections.)
    The subscription's tasks-0 stays cut off from its group coordinator as long."""
    def cut(driver):
        tasks_before = driver.tasks_on(0) | driver.tasks_on(1)
        lost = lost_threads(driver)
        topology.network.partition(topology.host("worker-0"), topology.host("driver"))
        cut_from_its_group_coordinator(tasks)
        driver.wait_until(lambda: lost_threads(driver) > lost, 2.5 * SILENT_S, "worker-0's thread lost")
        declared = lost_threads(driver)
        settled = Quiet(driver, STOP_GRACE_S + 10)  # longer than an ending batch may take
        driver.wait_until(lambda: settled() or lost_threads(driver) > declared + 5,
                          2 * STOP_GRACE_S + SILENT_S + 45, "a batch running without the cut-off executor")
        assert lost_threads(driver) <= declared + 5, \
            f"batches keep ending early: {lost_threads(driver) - declared} more since the loss"
        driver.wait_until(lambda: open_tasks(driver, 1) == tasks_before, 30,
                          f"every task open on worker-1: {tasks_before}")
        driver.all_committing(60)
        topology.network.heal()

    scenario("executor cut from the driver, held", cut)


class Quiet:
    """True once the driver has ended no batch early for ``seconds``."""

    def __init__(self, driver, seconds: float) -> None:
        self._driver, self._seconds = driver, seconds
        self._count, self._since = lost_threads(driver), time.monotonic()

    def __call__(self) -> bool:
        count = lost_threads(self._driver)
        if count != self._count:
            self._count, self._since = count, time.monotonic()
        return time.monotonic() - self._since >= self._seconds


@pytest.mark.parametrize("pause_s", [PAUSE_S, SHORT_S], ids=["60s", "5s"])
def test_a_python_worker_paused(scenario, pause_s):
    """Scenario 6: the Python worker holding worker-0's tasks is frozen (SIGSTOP), as in a long GC or
    VM pause, for ``PAUSE_S`` (the issue's 60 s) or ``SHORT_S``. Its connection to the driver stays open
    but silent: after ``SILENT_S`` the driver ends the batch and cancels the frozen thread's Spark task;
    the next batch opens its tasks elsewhere. The issue's "paused for 60 s and resumed after its tasks
    moved" asks for both, so the long pause proves the second: before the 60 s are up, every input and
    repartition partition must have been committed by its new owner (the pause is not cut short when
    they have); then it is resumed, still believing it owns them, and must not commit again (the counts
    stay exact). Spark may have ended the frozen worker meanwhile: the driver cancels the lost thread's
    Spark task ``SILENT_S`` + ``STOP_GRACE_S`` (40 s) into the pause, and Spark kills a cancelled task's
    Python worker, frozen or not (so it did in each of session 20's four 60 s runs; the zombie that
    wakes up is scenario 1's). The test says which it was. Paused for ``SHORT_S``, nothing was declared
    lost and it carries on."""
    def freeze(driver):
        driver.wait_until(lambda: holders(driver, 0), 90, "a task open on worker-0")
        holder = task_holder(driver, 0)
        lost = lost_threads(driver)
        pause(holder)
        paused = time.monotonic()
        try:
            if pause_s == PAUSE_S:
                driver.wait_until(lambda: lost_threads(driver) > lost, SILENT_S + 15,
                                  "the frozen thread lost")
                moved = driver.resumed_after(paused, pause_s - (time.monotonic() - paused))
                assert len(moved) == len(driver.partitions), \
                    f"not every partition committed by a new owner within the {pause_s:.0f} s pause: " \
                    f"{moved}\n{driver.logs()}"
                print(f"the paused worker's tasks committed elsewhere {max(moved.values()):.1f} s after")
            time.sleep(max(0.0, pause_s - (time.monotonic() - paused)))
        finally:
            resume(holder)
        print(f"the paused worker resumed after {time.monotonic() - paused:.1f} s: "
              f"{'woke up' if _alive(holder) else 'ended by Spark meanwhile'}")

    scenario(f"Python worker paused {pause_s:.0f} s", freeze)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def lost_threads(driver) -> int:
    """How many times the driver ended a batch early for a lost stream thread (its log says so)."""
    return driver.log_path.read_text(errors="replace").count("stream thread lost")


def holders(driver, worker: int) -> dict[str, int]:
    """The tasks open on ``worker`` and the pid of the Python worker holding each (its flock on the
    task's ``owner`` file, as /proc/locks lists it)."""
    owners = {}
    state = driver.cluster.worker_dir(worker) / "state" / driver.app_id
    for task in driver.tasks_on(worker):
        with contextlib.suppress(OSError):
            owners[(state / task / "owner").stat().st_ino] = task
    held = {}
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if fields[1] == "FLOCK" and int(fields[5].rsplit(":", 1)[1]) in owners:
            held[owners[int(fields[5].rsplit(":", 1)[1])]] = int(fields[4])
    return held


def open_tasks(driver, worker: int) -> set[str]:
    return set(holders(driver, worker))


def task_holder(driver, worker: int) -> int:
    """The pid of a Python worker holding a task open on ``worker``."""
    held = holders(driver, worker)
    assert held, f"no process holds a task of worker {worker}: {driver.tasks_on(worker)}"
    return next(iter(held.values()))


@pytest.mark.parametrize("hold_s", [30, 6], ids=["30s", "6s"])
def test_the_driver_isolated(topology, scenario, hold_s):
    """Scenario 4: the driver reaches nothing (Kafka, master, executors) for 30 s (the issue's figure:
    both threads declared lost) or 6 s (below ``SILENT_S``), then comes back."""
    def isolate_driver(driver):
        topology.network.isolate(topology.host("driver"))
        time.sleep(hold_s)
        topology.network.heal()

    scenario(f"driver isolated {hold_s} s", isolate_driver)


def test_strom_tasks_lost_nothing_and_kept_key_order_through_every_fault(tasks):
    """Scenario 7: the subscription ran through every fault above (scenario 1's kind: a member cut from
    its group coordinator; 3: the leader of the word count's input isolated, which leads some of its
    partitions or coordinates its group too; 5: slow and lossy links; and the others). Input stops; once
    all of it is committed: nothing lost, each key in order, repeats only as replays."""
    tasks.close()
    total, replays = tasks.check()
    print(f"strom.tasks: {total} records, {replays} processed again (replays from a committed position)")


def test_exactly_once_v2_was_one_transaction_per_stream_thread_through_every_fault(topology, word_count):
    """exactly_once_v2 as issue 38 made it, one transaction per stream thread (not one per task), held
    through every fault above: the cluster's coordinators know exactly the thread slots' transactional
    ids of the application (as ``strom transactions`` shows them), and every producer that wrote its
    repartition or output records is one of theirs, so each count above was committed by a thread's
    transaction, whatever was cut, paused or fenced on the way."""
    bootstrap, app_id = topology.bootstrap, word_count.app_id
    listed = _strom_json("transactions", "list", "-b", bootstrap)
    ids = {row["transactional.id"] for row in listed if row["transactional.id"].startswith(f"{app_id}-")}
    assert ids == {transactional_id(app_id, slot) for slot in range(WORKERS)}, ids
    slots = {json.loads(line)["producer_id"] for line in _strom(
        "transactions", "describe", "-b", bootstrap, *sorted(ids), "--output", "json").splitlines()}
    writers = {topic: {row["producer_id"] for row in _strom_json(
        "transactions", "describe-producers", "-b", bootstrap, "--topic", topic)}
        for topic in (word_count.names["counts"], f"{app_id}-words-repartition")}
    assert writers[word_count.names["counts"]], "no producer of the output known"  # (the repartition
    # topic's records are deleted once committed, and its producers may be forgotten with them)
    assert all(producers <= slots for producers in writers.values()), f"{writers}; thread slots: {slots}"
    print(f"transactional ids {sorted(ids)}, producer ids {sorted(slots)}")


def _strom(*args: str) -> str:
    """``strom ARGS``'s output, in this process (three interpreters' starts cost 40 s at load 40)."""
    started = time.monotonic()
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    print(f"strom {' '.join(args[:2])}: {time.monotonic() - started:.1f} s")
    return result.stdout


def _strom_json(*args: str) -> list[dict]:
    return json.loads(_strom(*args, "--output", "json"))
