"""What real-time execution adds: stream threads that hold their tasks between commits.

The assignor and the driver-thread line are checked alone; the rest on local Spark: figures that
move at every commit, wall-clock punctuation on an idle input, a prompt stop, the slot check, and a
Python worker SIGKILLed mid-transaction (every count exact, read_committed).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter

import pytest

from strom.errors import ConfigError
from strom.spark.runtime import SparkStreams
from strom.spark.runtime.assignment import assign_tasks
from strom.spark.runtime.control import ControlClient, ThreadControl
from strom.spark.runtime.lease import TaskLease
from strom.streams import Topology
from strom.streams.processor.api import Processor, PunctuationType, Record

from .conftest import produce_steadily, read_updates, wait_for
from .wordcount import S, word_count

TASKS = ["0_0", "0_1", "0_2", "1_0", "1_1"]


def test_every_task_once_and_parked_tasks_stay_with_their_worker():
    assignment = assign_tasks(TASKS, [0, 1], {0: ["1_1", "0_2"], 1: ["0_0"]})
    assert sorted(t for tasks in assignment.values() for t in tasks) == sorted(TASKS)
    assert {"1_1", "0_2"} <= set(assignment[0]) and "0_0" in assignment[1]
    assert sorted(len(tasks) for tasks in assignment.values()) == [2, 3]


def test_a_worker_holding_more_than_its_share_gives_the_rest_away():
    assignment = assign_tasks(TASKS, [0, 1, 2], {0: TASKS})
    assert [len(assignment[i]) for i in range(3)] == [2, 2, 1]
    assert sorted(t for tasks in assignment.values() for t in tasks) == sorted(TASKS)


def test_stateful_tasks_are_spread_first_so_a_new_thread_does_not_get_all_the_state():
    """Growing from one thread to two: the first keeps a share of the state, not the stateless tasks
    that sort first (the count-only assignor gave the new thread 1_0 and 1_1 both)."""
    four = ["0_0", "0_1", "1_0", "1_1"]
    assignment = assign_tasks(four, [0, 1], {0: four, 1: []}, stateful={"1_0", "1_1"})
    assert assignment == {0: ["1_0", "0_0"], 1: ["1_1", "0_1"]}
    assert assign_tasks(four, [0, 1], {0: four, 1: []}) == {0: ["0_0", "0_1"], 1: ["1_0", "1_1"]}


def test_every_thread_holds_its_share_of_the_state_and_of_all_tasks_and_keeps_what_it_may():
    rng = random.Random(7)
    for _ in range(300):
        tasks = [f"{s}_{p}" for s in range(rng.randint(1, 3)) for p in range(rng.randint(1, 6))]
        stateful = set(rng.sample(tasks, rng.randint(0, len(tasks))))
        threads = sorted(rng.sample(range(6), rng.randint(1, 5)))
        parked: dict[int, list[str]] = {}
        for task in tasks:
            if rng.random() < 0.8:
                parked.setdefault(rng.randrange(6), []).append(task)
        assignment = assign_tasks(tasks, threads, parked, stateful=stateful)
        assert sorted(t for held in assignment.values() for t in held) == sorted(tasks)
        share, state_share = -(-len(tasks) // len(threads)), -(-len(stateful) // len(threads))
        for thread, held in assignment.items():
            assert len(held) <= share and len(stateful & set(held)) <= state_share, (tasks, stateful, parked)
            mine = [t for t in parked.get(thread, []) if t in stateful]
            assert len(stateful & set(held) & set(mine)) == min(len(mine), state_share)  # sticky


def test_a_lost_stateful_task_goes_where_its_caught_up_standby_is_within_the_share_of_state():
    parked = {0: ["0_0", "1_0"], 1: ["0_1"]}
    assignment = assign_tasks(["0_0", "0_1", "1_0", "1_1"], [0, 1], parked, {0: {"1_1": 3}},
                              acceptable_lag=10, stateful={"1_0", "1_1"})
    assert assignment == {0: ["1_0", "0_0"], 1: ["1_1", "0_1"]}  # thread 0 has its share of state


def test_threads_get_their_tasks_once_all_said_hello_and_hear_a_stop():
    heard: list[tuple[str, dict]] = []
    control = ThreadControl("127.0.0.1", lambda thread, tasks: heard.append((thread, tasks)))
    try:
        control.begin_batch(1, 2, ["0_0", "0_1"], hello_timeout_s=30)
        results: dict[int, list[str]] = {}
        clients_ = [ControlClient(control.address, control.token, 1, i) for i in range(2)]

        def hello(i: int) -> None:
            results[i] = clients_[i].hello(["0_1"] if i else [])

        hellos = [threading.Thread(target=hello, args=(i,)) for i in range(2)]
        hellos[0].start()
        time.sleep(0.2)
        assert results == {}  # thread 0 waits for thread 1
        hellos[1].start()
        for hello in hellos:
            hello.join(10)
        assert results == {0: ["0_0"], 1: ["0_1"]}
        clients_[1].report({"0_1": {"records": 5, "commits": 1}})
        assert wait_for(lambda: heard == [("stream-thread-1", {"0_1": {"records": 5, "commits": 1}})], 5)
        control.stop_threads()
        assert all(c.stopping.wait(5) for c in clients_)
        with pytest.raises(ConnectionError):
            ControlClient(control.address, "not-the-token", 1, 0).hello([])
    finally:
        control.close()


def test_a_thread_that_closes_its_connection_is_gone_and_a_late_stop_to_it_is_dropped():
    """A stream thread's close ends the connection at once (its listening thread's file kept it open,
    so the driver never saw the thread go); stop_threads takes its list of connections, then sends, so
    a stop may still reach a handler that has closed its file: it must not fail the driver's stop."""
    control = ThreadControl("127.0.0.1", lambda thread, tasks: None)
    try:
        control.begin_batch(1, 1, ["0_0"], hello_timeout_s=30)
        client = ControlClient(control.address, control.token, 1, 0)
        assert client.hello([]) == ["0_0"]
        connection = control._connections["stream-thread-0"]
        client.close()
        assert wait_for(lambda: connection.wfile.closed, 5)
        connection.send({"type": "stop"})
        assert control.threads["stream-thread-0"].thread_state == "DEAD"
    finally:
        control.close()


def _props(broker, tmp_path, app_id: str, **extra) -> dict:
    return {"application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
            "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path),
            "execution.mode": "realtime", "commit.interval.ms": 100, **extra}


@pytest.mark.spark
@pytest.mark.slow
def test_more_threads_than_task_slots_fails_start(broker, spark, topics, tmp_path):
    names = topics(lines=4, counts=4)
    props = _props(broker, tmp_path, f"rt-slots-{names['lines']}", **{"num.stream.threads": 3})
    app = SparkStreams(word_count(names["lines"], names["counts"]), props, spark)
    with pytest.raises(ConfigError, match=r"num.stream.threads=3 needs 3 Spark task slots, but the cluster"):
        app.start()


def ticking(source: str, sink: str) -> Topology:
    """Forwards one record per WALL_CLOCK_TIME punctuation every 100 ms, records or not."""

    class Ticker(Processor):
        def init(self, context) -> None:
            super().init(context)
            context.schedule(100, PunctuationType.WALL_CLOCK_TIME,
                             lambda now: context.forward(Record("tick", str(now), now)))

        def process(self, record: Record) -> None:
            pass

    return (Topology().add_source("in", source, key_serde=S, value_serde=S)
            .add_processor("ticker", Ticker, "in")
            .add_sink("out", sink, "ticker", key_serde=S, value_serde=S))


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.slow
def test_wall_clock_punctuation_fires_on_an_idle_input_and_stop_is_prompt(broker, spark, topics, tmp_path):
    names = topics(source=1, sink=1)
    app = SparkStreams(ticking(names["source"], names["sink"]),
                       _props(broker, tmp_path, f"rt-tick-{names['source']}"), spark)
    app.start()
    try:
        assert wait_for(lambda: app.progress.last_commit is not None, 120), "no commit"
        first = app.progress.tasks["0_0"].output
        time.sleep(3.0)
        ticks = app.progress.tasks["0_0"].output - first
        assert app.progress.batches == 0  # the figures moved within the batch, at the commits
        [thread] = app.metadata_for_local_threads()
        assert (thread.active_tasks, thread.thread_state) == (["0_0"], "RUNNING")
        assert thread.pid != os.getpid()
    finally:
        started = time.monotonic()
        app.stop()
        stopping = time.monotonic() - started
    assert ticks >= 15, f"{ticks} punctuations in 3 s at one per 100 ms"  # a loaded host may skip some
    assert stopping < 5.0, f"stop() took {stopping:.1f}s"
    ticked = read_updates(broker.bootstrap_servers, names["sink"], value_serde=S)["tick"]
    assert len(ticked) >= ticks  # committed, read_committed
    assert app.state is SparkStreams.State.NOT_RUNNING


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.slow
def test_a_python_worker_killed_mid_transaction_loses_and_repeats_nothing(broker, spark, topics, tmp_path):
    names = topics(lines=2, counts=2)
    rng = random.Random(3)
    words = [f"w{i}" for i in range(10)]
    lines = [(f"k{i}", " ".join(rng.choices(words, k=rng.randint(1, 4)))) for i in range(1200)]
    app = SparkStreams(word_count(names["lines"], names["counts"]),
                       _props(broker, tmp_path, f"rt-sigkill-{names['lines']}"), spark)
    app.start()
    writer = threading.Thread(target=produce_steadily,
                              args=(broker.bootstrap_servers, names["lines"], lines, 6.0))
    try:
        assert wait_for(lambda: len(app.metadata_for_local_threads()) == 2, 120), "threads did not start"
        writer.start()
        time.sleep(2.0)
        victim = app.metadata_for_local_threads()[0]
        os.kill(victim.pid, signal.SIGKILL)
        writer.join()
        assert app.wait_until_caught_up(180), f"lag {app.lag()}"
        assert victim.pid not in {t.pid for t in app.metadata_for_local_threads()}
    finally:
        writer.join()
        app.stop()
    expected = Counter(w for _, line in lines for w in line.split())
    updates = read_updates(broker.bootstrap_servers, names["counts"])
    assert {k: v[-1] for k, v in updates.items()} == dict(expected)
    for key, seen in updates.items():
        assert seen == sorted(set(seen)), f"{key}: an update was written twice: {seen}"



@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.slow
def test_a_running_thread_hands_a_task_over_when_another_process_asks(broker, spark, topics, tmp_path):
    """What a retry of a stream thread's Spark task on the same machine does while the old attempt
    still runs: it asks for the task's lease, and the running thread closes the task after its commit."""
    names = topics(source=1, sink=1)
    app_id = f"rt-handover-{names['source']}"
    app = SparkStreams(ticking(names["source"], names["sink"]), _props(broker, tmp_path, app_id), spark)
    app.start()
    try:
        assert wait_for(lambda: app.progress.last_commit is not None, 120), "no commit"
        started = time.monotonic()
        lease = TaskLease.acquire(tmp_path / app_id / "0_0", timeout_s=30)
        took = time.monotonic() - started
        lease.release()
    finally:
        app.stop()
    assert took < 10, f"the running thread held the task {took:.1f}s after it was asked for it"
