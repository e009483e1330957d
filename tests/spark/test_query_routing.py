"""The driver's query router against real worker endpoints, in one process and without Spark: two
endpoints serve the stores of TopologyTestDriver tasks (one holds partition 0 active and partition 1 as
a standby, the other partition 1 active), as the batch's thread metadata says. Standbys answer when
the active cannot and the request allows it, never when it requires the active; an endpoint that is
gone or a task that is not open gives a retriable NOT_PRESENT; a bound only actives reach."""

from __future__ import annotations

import socket
import threading
from multiprocessing.connection import Connection
from types import SimpleNamespace

import pytest

from strom.errors import InvalidStateStoreError
from strom.kafka.serdes import Serdes
from strom.spark.queries.channel import Frames
from strom.spark.queries.router import QueryRouter, murmur2_partition
from strom.spark.queries.server import QueryEndpoint
from strom.spark.runtime.control import ThreadMetadata
from strom.streams import (
    Consumed,
    FailureReason,
    KeyQuery,
    Materialized,
    Position,
    PositionBound,
    RangeQuery,
    StateQueryRequest,
    StreamsBuilder,
    TopologyTestDriver,
)

S = Serdes.String()
TOKEN = "secret-of-the-run"


def _thread(tasks: dict, standbys: dict) -> SimpleNamespace:
    """What an endpoint reads of a stream thread: its open tasks and standbys."""
    active = {t: SimpleNamespace(open=SimpleNamespace(task=task)) for t, task in tasks.items()}
    kept = {t: SimpleNamespace(task=task) for t, task in standbys.items()}
    return SimpleNamespace(tasks=active, standbys=kept)


@pytest.fixture
def cluster(props):
    """Partition p of the store is task 0_p: partition 0 holds a and c, partition 1 holds b twice (its
    standby, on the other endpoint, has applied one of the two so far)."""
    drivers = []
    for i, words in enumerate((["a", "c"], ["b", "b"], ["b"])):
        driver = TopologyTestDriver(_topology(), {**props, "state.dir": f"{props['state.dir']}-{i}"})
        source = driver.create_input_topic("words", S, S)
        for word in words:
            source.pipe_input(word, "x")
        drivers.append(driver)
    endpoints = [QueryEndpoint(TOKEN, "127.0.0.1", "127.0.0.1") for _ in range(2)]
    endpoints[0].thread = _thread({"0_0": drivers[0].tasks[0]}, {"0_1": drivers[2].tasks[0]})
    endpoints[1].thread = _thread({"0_1": drivers[1].tasks[0]}, {})
    threads = [ThreadMetadata("stream-thread-0", "RUNNING", ["0_0"], "h", 1, 1, standby_tasks=["0_1"],
                              query_address=endpoints[0].address),
               ThreadMetadata("stream-thread-1", "RUNNING", ["0_1"], "h", 2, 1,
                              query_address=endpoints[1].address)]
    router = QueryRouter("routing", {"counts": (0, 2)}, lambda: (threads, TOKEN),
                         lambda store: S.serializer())
    yield SimpleNamespace(router=router, threads=threads, endpoints=endpoints)
    router.close()
    for endpoint in endpoints:
        endpoint.close()
    for driver in drivers:
        driver.close()


def _topology():
    builder = StreamsBuilder()
    counts = Materialized.as_("counts")
    builder.stream("words", Consumed.with_(S, S)).group_by_key().count(materialized=counts)
    return builder.build()


def _request(query=None) -> StateQueryRequest:
    return StateQueryRequest.in_store("counts").with_query(query or RangeQuery.with_no_bounds())


@pytest.fixture
def props(tmp_path):
    return {"application.id": "routing", "state.dir": str(tmp_path / "state")}


def test_each_partition_is_answered_by_its_active(cluster):
    result = cluster.router.query(_request().require_active())
    assert all(r.is_success() and not r.standby for r in result.partition_results.values())
    assert {p: r.result for p, r in result.partition_results.items()} == {0: [("a", 1), ("c", 1)],
                                                                           1: [("b", 2)]}
    metadata = cluster.router.query_metadata_for_key("counts", "b")
    assert metadata.partition == murmur2_partition(b"b", 2)
    assert metadata.active_host.port == cluster.endpoints[metadata.partition].address[1]
    served = {m.host_info.port: (set(m.active_partitions), set(m.standby_partitions))
              for m in cluster.router.streams_metadata_for_store("counts")}
    ports = [endpoint.address[1] for endpoint in cluster.endpoints]
    assert served == {ports[0]: ({0}, {1}), ports[1]: ({1}, set())}


def test_a_lost_active_is_replaced_by_its_standby_only_when_allowed(cluster):
    cluster.endpoints[1].close()  # the worker of partition 1's active is gone
    required = cluster.router.query(_request().require_active()).partition_results
    assert required[0].is_success()
    assert required[1].failure_reason is FailureReason.NOT_PRESENT and "retry" in required[1].failure_message
    allowed = cluster.router.query(_request()).partition_results
    assert allowed[1].is_success() and allowed[1].standby and allowed[1].result == [("b", 1)]  # older
    assert not allowed[0].standby
    bound = PositionBound.at(Position.empty().with_component("words", 1, 0))
    bounded = cluster.router.query(_request().with_position_bound(bound)).partition_results
    assert bounded[1].failure_reason is FailureReason.NOT_UP_TO_BOUND  # the standby is not there


def test_a_finished_thread_s_parked_tasks_answer_as_the_active_until_a_thread_runs_them(cluster):
    cluster.threads[1].thread_state = "PENDING_SHUTDOWN"  # its batch ended; its tasks stay open, parked
    required = cluster.router.query(_request().require_active()).partition_results
    assert required[1].is_success() and not required[1].standby and required[1].result == [("b", 2)]
    cluster.threads[0].active_tasks = ["0_0", "0_1"]  # the next batch runs partition 1 on the other worker
    moved = cluster.router.query(_request().require_active()).partition_results  # asked there, not parked
    assert moved[1].failure_reason is FailureReason.NOT_ACTIVE  # it has only opened its standby yet
    allowed = cluster.router.query(_request().with_partitions([1])).partition_results
    assert allowed[1].is_success() and allowed[1].standby  # the worker it is parked in, or the standby


def test_between_batches_the_workers_that_held_the_tasks_answer(cluster):
    for thread in cluster.threads:  # the batch ended: listed as finished until the next batch's hellos
        thread.thread_state = "PENDING_SHUTDOWN"
    required = cluster.router.query(_request().require_active()).partition_results
    assert {p: (r.result, r.standby) for p, r in required.items()} == {  # the last actives, parked
        0: ([("a", 1), ("c", 1)], False), 1: ([("b", 2)], False)}
    cluster.endpoints[1].close()  # partition 1's last active is gone
    required = cluster.router.query(_request().require_active()).partition_results
    assert required[1].failure_reason is FailureReason.NOT_PRESENT
    allowed = cluster.router.query(_request()).partition_results
    assert allowed[1].standby and allowed[1].result == [("b", 1)]  # the standby that held it
    cluster.threads[:] = []  # no longer listed (lost): no active, the workers that held them are stale
    required = cluster.router.query(_request().require_active()).partition_results
    assert all(r.failure_reason is FailureReason.NOT_PRESENT for r in required.values())
    allowed = cluster.router.query(_request()).partition_results
    assert {p: (r.result, r.standby) for p, r in allowed.items()} == {
        0: ([("a", 1), ("c", 1)], True), 1: ([("b", 1)], True)}


def test_a_key_query_asks_the_key_s_partition_and_the_others_only_when_it_lacks_the_key(cluster):
    assert murmur2_partition(b"a", 2) == murmur2_partition(b"b", 2) == 0
    moved = cluster.router.query(_request(KeyQuery.with_key("b")).require_active())  # input partitioned
    assert {p: r.result for p, r in moved.partition_results.items()} == {0: None, 1: 2}  # otherwise
    cluster.endpoints[1].close()
    result = cluster.router.query(_request(KeyQuery.with_key("a")).require_active())
    assert list(result.partition_results) == [0]  # partition 1, whose endpoint is gone, was not asked
    assert result.get_only_partition_result().result == 1
    missing = cluster.router.query(_request(KeyQuery.with_key("z")).require_active()).partition_results
    assert missing[0].result is None and missing[1].failure_reason is FailureReason.NOT_PRESENT


def test_a_thread_not_running_or_a_task_not_open_is_not_present(cluster):
    cluster.threads[1].thread_state = "DEAD"
    answers = cluster.router.query(_request(KeyQuery.with_key("b")).require_active()).partition_results
    assert answers[1].failure_reason is FailureReason.NOT_PRESENT
    assert "no stream thread" in answers[1].failure_message
    cluster.threads[1].thread_state = "RUNNING"
    cluster.endpoints[1].thread = _thread({}, {})  # a new batch's thread, its tasks still opening
    answers = cluster.router.query(_request(KeyQuery.with_key("b")).require_active()).partition_results
    assert answers[1].failure_reason is FailureReason.NOT_PRESENT and "not open" in answers[1].failure_message
    with pytest.raises(InvalidStateStoreError, match="no partition 2"):
        cluster.router.query(_request().with_partitions([2]))


def test_an_endpoint_refuses_a_caller_without_the_run_s_token(cluster):
    stranger = QueryRouter("routing", {"counts": (0, 2)}, lambda: (cluster.threads, "another-run"),
                           lambda store: S.serializer())
    try:
        answers = stranger.query(_request()).partition_results
    finally:
        stranger.close()
    assert all(r.failure_reason is FailureReason.NOT_PRESENT for r in answers.values())
    fresh = QueryRouter("routing", {"counts": (0, 2)}, lambda: (cluster.threads, TOKEN),
                        lambda store: S.serializer())  # no connection kept open yet
    try:
        with socket.create_connection(cluster.endpoints[0].address):  # a caller that never answers
            assert fresh.query(_request()).partition_results[0].is_success()  # the driver is still served
    finally:
        fresh.close()


def test_callers_at_once_share_the_connections_and_each_gets_its_own_answer(cluster):
    """Requests that meet at an endpoint go in one message: each caller still gets the answer to its own
    request, and callers of an endpoint that goes away all get a retriable answer (none waits on)."""
    expected = {"a": 1, "b": 2, "c": 1, "z": None}
    wrong: list[tuple[str, object]] = []

    def caller(index: int) -> None:
        for i in range(40):
            key = "abcz"[(index + i) % 4]
            result = cluster.router.query(_request(KeyQuery.with_key(key)).require_active())
            found = [r.result for r in result.partition_results.values() if r.result is not None]
            if found != ([] if expected[key] is None else [expected[key]]):
                wrong.append((key, result))
            if i % 10 == 0:
                ranges = cluster.router.query(_request().require_active()).partition_results
                if {p: r.result for p, r in ranges.items()} != {0: [("a", 1), ("c", 1)], 1: [("b", 2)]}:
                    wrong.append(("range", ranges))

    callers = [threading.Thread(target=caller, args=(i,)) for i in range(12)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join(60)
    assert not wrong, wrong[:3]

    lost: list[object] = []

    def asker() -> None:
        request = _request(KeyQuery.with_key("b")).require_active()
        for _ in range(30):
            answer = cluster.router.query(request).partition_results[1]
            if not (answer.result == 2 or answer.failure_reason is FailureReason.NOT_PRESENT):
                lost.append(answer)

    askers = [threading.Thread(target=asker) for _ in range(8)]
    for thread in askers:
        thread.start()
    cluster.endpoints[1].close()  # its connections stay open: the next requests on them go unanswered
    for thread in askers:
        thread.join(120)
    assert not any(thread.is_alive() for thread in askers), "a caller still waits"
    assert not lost, lost[:3]


def test_a_request_that_cannot_be_sent_fails_alone(cluster):
    with pytest.raises(InvalidStateStoreError, match="picklable"):
        cluster.router.query(_request(KeyQuery.with_key(threading.Lock())))
    assert cluster.router.query(_request(KeyQuery.with_key("b"))).partition_results[1].result == 2


def test_frames_read_messages_that_arrive_together_or_in_pieces():
    left, right = socket.socketpair()
    sender, receiver = Connection(left.detach()), Connection(right.detach())
    frames = Frames(receiver)
    big = ["x" * 1000] * 300  # more than one read's worth
    writer = threading.Thread(target=lambda: [sender.send(m) for m in ("small", big, {"after": 1})])
    writer.start()
    assert [frames.recv() for _ in range(3)] == ["small", big, {"after": 1}]
    writer.join(10)
    sender.close()
    with pytest.raises(EOFError):
        frames.recv()
    receiver.close()
