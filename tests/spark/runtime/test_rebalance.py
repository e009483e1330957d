"""How the driver learns that a real-time batch must end early (issue 27), on the control line alone:
a thread lost (connection ended before it said it finished, or silent), a thread that started after
the tasks were assigned; and how tasks are assigned when some threads never come."""

from __future__ import annotations

import threading
import time

import pytest

from strom.spark.runtime import control as control_module
from strom.spark.runtime.assignment import assign_standbys, assign_tasks
from strom.spark.runtime.control import FENCED, FINISHED, ControlClient, ThreadControl
from strom.spark.runtime.realtime import unrecorded_slots

from .conftest import wait_for

TASKS = ["0_0", "0_1", "1_0", "1_1"]


@pytest.fixture
def control():
    line = ThreadControl("127.0.0.1", lambda thread, tasks: None)
    yield line
    line.close()


def _two_threads_said_hello(control: ThreadControl) -> list[ControlClient]:
    """Batch 1 begun with two threads, both connected and assigned their tasks."""
    control.begin_batch(1, 2, TASKS, hello_timeout_s=30)
    clients = [ControlClient(control.address, control.token, 1, i) for i in range(2)]
    hellos = [threading.Thread(target=c.hello, args=([],)) for c in clients]
    for hello in hellos:
        hello.start()
    for hello in hellos:
        hello.join(10)
    return clients


def test_fewer_threads_keep_their_tasks_and_take_the_lost_ones_over():
    assignment = assign_tasks(TASKS, [1], {1: ["0_1", "1_1"], 0: ["0_0", "1_0"]})
    assert assignment == {1: ["0_1", "1_1", "0_0", "1_0"]}


def test_tasks_go_to_the_threads_present_when_one_never_says_hello(control):
    control.begin_batch(1, 2, TASKS, hello_timeout_s=0.5)
    started = time.monotonic()
    present = ControlClient(control.address, control.token, 1, 0)
    assert present.hello(["1_0"]) == ["1_0", "0_0", "0_1", "1_1"]
    assert 0.4 < time.monotonic() - started < 5
    assert control.reason_to_end() is None
    late = ControlClient(control.address, control.token, 1, 1)
    assert late.hello([]) == [] and late.stopping.is_set()
    assert "started after the tasks were assigned" in control.reason_to_end()
    present.close()
    late.close()


def test_a_thread_whose_connection_ends_before_it_finished_is_lost(control):
    clients = _two_threads_said_hello(control)
    assert control.live_threads() == 2 and control.reason_to_end() is None
    clients[0].close()  # as a SIGKILLed Python worker's connection ends
    assert wait_for(lambda: control.reason_to_end() is not None, 5)
    assert "stream-thread-0" in control.reason_to_end()
    control.end_batch()
    assert clients[1].stopping.wait(5)
    assert control.reason_to_end() is None  # the batch is ending already
    retry = ControlClient(control.address, control.token, 1, 0)
    assert retry.hello([]) == [] and retry.stopping.is_set()  # a retry of the lost thread gets nothing
    clients[1].report({}, FINISHED)
    clients[1].close()
    assert wait_for(lambda: control.live_threads() == 0, 5)
    retry.close()


def test_a_thread_that_finishes_is_not_lost_and_one_that_fails_fails_the_batch(control):
    clients = _two_threads_said_hello(control)
    clients[0].report({}, FINISHED)
    clients[0].close()
    assert wait_for(lambda: control.live_threads() == 1, 5)
    assert control.reason_to_end() is None
    clients[1].failed(ValueError("a processor raised"))  # the batch ends, the application fails with it
    clients[1].close()
    assert wait_for(lambda: control.live_threads() == 0, 5)
    assert control.failure == "stream-thread-1: ValueError: a processor raised"
    assert control.reason_to_end() == f"stream thread failed: {control.failure}"


def test_a_finished_thread_stays_listed_as_the_parked_holder_until_its_slot_says_hello_again(control):
    clients = _two_threads_said_hello(control)
    clients[0].report({}, FINISHED)
    clients[0].close()
    clients[1].close()  # lost: it never said it finished
    assert wait_for(lambda: control.live_threads() == 0, 5)
    control.begin_batch(2, 1, TASKS, hello_timeout_s=30)  # the next batch's threads have not said hello
    assert {name: t.thread_state for name, t in control.threads.items()} == {"stream-thread-0": FINISHED}
    again = ControlClient(control.address, control.token, 2, 0)
    threading.Thread(target=again.hello, args=([],), daemon=True).start()
    assert wait_for(lambda: control.threads["stream-thread-0"].batch == 2, 10)
    assert control.threads["stream-thread-0"].thread_state == "RUNNING"
    again.close()


def test_a_silent_thread_is_lost_and_heartbeats_keep_a_busy_one(control, monkeypatch):
    monkeypatch.setattr(control_module, "SILENT_S", 2.5)
    control.begin_batch(1, 1, TASKS, hello_timeout_s=30)
    client = ControlClient(control.address, control.token, 1, 0)
    client.hello([])
    time.sleep(4.0)  # no progress report, but a heartbeat every second
    assert control.reason_to_end() is None
    client._closed.set()  # heartbeats stop, the connection stays open: a machine gone silent
    assert wait_for(lambda: control.reason_to_end() is not None, 6)
    client.close()


def test_a_standby_goes_to_another_machine_than_its_active_and_none_without_one():
    assignment = {0: ["0_0", "1_0"], 1: ["0_1", "1_1"], 2: []}
    machines = {0: "a", 1: "b", 2: "b"}
    standbys = assign_standbys(assignment, 1, machines)
    assert sorted(standbys[1] + standbys[2]) == ["0_0", "1_0"] and standbys[0] == ["0_1", "1_1"]
    assert assign_standbys({0: ["0_0"], 1: ["0_1"]}, 1, {0: "a", 1: "a"}) == {0: [], 1: []}
    held = assign_standbys(assignment, 1, machines, held={2: {"0_0": 0}})
    assert "0_0" in held[2]  # kept where it is open
    stateful = assign_standbys(assignment, 1, machines, stateful={"1_0", "1_1"})
    assert sorted(t for tasks in stateful.values() for t in tasks) == ["1_0", "1_1"]


def test_a_lost_task_goes_where_its_caught_up_standby_is():
    parked = {0: ["0_0"], 1: ["0_1"]}
    standbys = {0: {"1_1": 50_000}, 2: {"1_1": 12}}
    assignment = assign_tasks(["0_0", "0_1", "1_1"], [0, 1, 2], parked, standbys, acceptable_lag=10_000)
    assert assignment[2] == ["1_1"]
    lagging = assign_tasks(["0_0", "0_1", "1_1"], [0, 1], parked, {0: {"1_1": 50_000}}, acceptable_lag=10_000)
    assert lagging[0] == ["0_0", "1_1"]  # least loaded, by index: the lagging standby is no reason


def test_slots_without_a_thread_are_fenced_before_any_task_is_assigned(control):
    """Exactly-once fencing (issue 38): a suspect slot whose thread never says hello is fenced by the
    driver before the assignment reaches anyone; a present thread fenced its own slot before its hello."""
    fenced: list[list[int]] = []
    assignment = control.begin_batch(1, 2, TASKS, hello_timeout_s=0.5, suspects={0, 1, 2},
                                     fence=fenced.append)
    present = ControlClient(control.address, control.token, 1, 0)
    assert present.hello([]) == TASKS
    assert fenced == [[1, 2]] and assignment.fenced == [1, 2]
    late = ControlClient(control.address, control.token, 1, 1)
    assert late.hello([]) == []
    assert assignment.hellos == {0, 1}  # the next batch's suspects: each holds its slot's id now
    present.close()
    late.close()


def test_a_first_start_without_a_record_fences_the_slots_its_configuration_can_have():
    """Not one slot per task (64 init_transactions for word count on 32 partitions): as many threads as a
    run of this configuration could have had, at most one per task."""
    assert unrecorded_slots(tasks=64, threads=2, requested=None, parallelism=2) == 2
    assert unrecorded_slots(tasks=64, threads=2, requested=6, parallelism=2) == 6  # fewer slots than wanted
    assert unrecorded_slots(tasks=64, threads=2, requested=None, parallelism=16) == 16  # a larger cluster
    assert unrecorded_slots(tasks=4, threads=2, requested=8, parallelism=16) == 4


def test_a_failed_fence_assigns_nothing_and_fails_the_batch(control):
    def unreachable(slots: list[int]) -> None:
        raise ConnectionError("no broker")

    control.begin_batch(1, 2, TASKS, hello_timeout_s=0.3, suspects={0, 1}, fence=unreachable)
    client = ControlClient(control.address, control.token, 1, 0)
    assert client.hello([]) == [] and client.stopping.is_set()
    assert control.failure == "fencing the slots of lost stream threads failed: no broker"  # the app fails
    client.close()


def test_a_parked_task_is_reusable_only_in_the_worker_that_ran_it_last(control):
    for batch, parked, reusable in [(1, ["0_0"], []), (2, ["0_0"], ["0_0"])]:
        control.begin_batch(batch, 1, ["0_0"], hello_timeout_s=30)
        client = ControlClient(control.address, control.token, batch, 0)
        assert client.hello(parked) == ["0_0"] and client.reusable == reusable
        client.report({}, FINISHED)
        client.close()
    control._holders["0_0"] = ("elsewhere", 1)  # another worker ran it since (its thread said hello there)
    control.begin_batch(3, 1, ["0_0"], hello_timeout_s=30)
    client = ControlClient(control.address, control.token, 3, 0)
    assert client.hello(["0_0"]) == ["0_0"] and client.reusable == []
    client.close()


def test_what_a_thread_of_an_earlier_batch_reports_is_ignored(control):
    """A frozen thread thawed after its tasks moved is fenced; its report must not fail the application."""
    control.begin_batch(1, 1, TASKS, hello_timeout_s=30)
    zombie = ControlClient(control.address, control.token, 1, 0)
    zombie.hello([])
    control.end_batch()
    control.begin_batch(2, 1, TASKS, hello_timeout_s=30)
    zombie.failed(RuntimeError("fenced"))
    zombie.report({}, FENCED)
    time.sleep(0.3)
    assert control.failure is None and control.reason_to_end() is None
    zombie.close()


def test_only_a_thread_of_the_running_batch_may_open_its_tasks_again(control):
    """A thread whose transaction was aborted reopens its tasks itself only while its batch runs: once a
    new batch began (its tasks may move; the slot is fenced again) or the batch is ending, it may not."""
    control.begin_batch(1, 1, TASKS, hello_timeout_s=30)
    thread = ControlClient(control.address, control.token, 1, 0)
    thread.hello([])
    assert thread.may_revive()
    assert control.reason_to_end() is None
    control.begin_batch(2, 1, TASKS, hello_timeout_s=30)  # as after the thread froze and its batch ended
    assert not thread.may_revive()
    thread.close()
    control.begin_batch(3, 1, TASKS, hello_timeout_s=30)
    ending = ControlClient(control.address, control.token, 3, 0)
    ending.hello([])
    control.end_batch()
    assert not ending.may_revive()
    ending.close()
