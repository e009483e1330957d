"""Open tasks kept across micro-batches (without Spark): reused when the next batch starts where the
task stands, reopened when it was fenced or another opener asked for it, closed when idle."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from strom.errors import BrokerUnavailableError
from strom.kafka import clients
from strom.spark.runtime.lease import TaskLease
from strom.spark.runtime.open_task import OpenTask
from strom.spark.runtime.parked import PARKED, ParkedTasks
from strom.streams.config import StreamsConfig
from strom.streams.processor.records import TaskId
from support.processes import free_port

from .conftest import read_updates
from .task_batches import counting_app, run_batch

pytestmark = [pytest.mark.broker]


@pytest.fixture
def counting(broker, topics, tmp_path):
    names = topics(source=1, sink=1)
    topology, config = counting_app(broker.bootstrap_servers, names, str(tmp_path), "rt-reuse",
                                    [("a", "x"), ("b", "x"), ("a", "x"), ("a", "x"), ("b", "x")])
    return topology, config, names


def test_next_batch_reuses_the_open_task_and_a_fenced_one_is_reopened(broker, counting):
    topology, config, names = counting
    bootstrap, source = broker.bootstrap_servers, names["source"]

    first = run_batch(topology, config, bootstrap, source, 0, 2)
    second = run_batch(topology, config, bootstrap, source, 2, 3)
    assert (first.reused, second.reused) == (False, True)
    assert (second.records, second.restored, second.output) == (1, 0, 1)

    # another attempt of task 0_0 (elsewhere, without the lease) fences the parked producer
    other: Producer = clients.producer(bootstrap, **{"transactional.id": f"{config.application_id}-0_0"})
    other.init_transactions(30)
    third = run_batch(topology, config, bootstrap, source, 3, 5)
    assert (third.reused, third.skipped, third.records) == (False, False, 2)
    assert read_updates(bootstrap, names["sink"]) == {"a": [1, 2, 3], "b": [1, 2]}


def test_a_micro_batch_task_s_own_producer_is_patient(broker, counting):
    """A stall of a micro-batch task's producer fails its Spark task, so it waits the commit timeout
    (docs/runtime.md); a stream thread's producers keep the short bounds."""
    topology, config, names = counting
    run_batch(topology, config, broker.bootstrap_servers, names["source"], 0, 2)
    parked = PARKED.peek((config.application_id, "0_0"))
    assert isinstance(parked, OpenTask) and parked.transactions is not None
    assert parked.transactions.patient


def test_batch_not_starting_where_the_task_stands_reopens_it(broker, counting):
    topology, config, names = counting
    bootstrap, source = broker.bootstrap_servers, names["source"]
    run_batch(topology, config, bootstrap, source, 0, 3)
    replay = run_batch(topology, config, bootstrap, source, 0, 3)  # Spark retried a committed batch
    assert (replay.reused, replay.skipped) == (False, True)
    other_run = run_batch(topology, config, bootstrap, source, 3, 5, run_id="a later start()")
    assert (other_run.reused, other_run.records) == (False, 2)
    assert read_updates(bootstrap, names["sink"]) == {"a": [2, 3], "b": [1, 2]}


def test_another_opener_makes_the_holder_release_the_parked_task(broker, counting):
    topology, config, names = counting
    run_batch(topology, config, broker.bootstrap_servers, names["source"], 0, 3)
    key = (config.application_id, "0_0")
    started = time.monotonic()
    # as another Python worker would: the lease (and RocksDB) are held by the parked task until released
    opener = OpenTask(topology, config, TaskId(0, 0), (names["source"],), "counts")
    try:
        assert time.monotonic() - started < 5
        assert PARKED.take(key) is None
        assert opener.open([(names["source"], 0)]) == 0  # the local checkpoint is current
        assert opener.positions == {(names["source"], 0): 3}
    finally:
        opener.close()


class _Held:
    def __init__(self, lease: TaskLease) -> None:
        self.lease = lease

    @property
    def release_requested(self) -> bool:
        return self.lease.release_requested

    def close(self) -> None:
        self.lease.release()


def test_idle_parked_task_is_closed_and_its_lease_freed(tmp_path):
    parked = ParkedTasks(idle_s=0.1)
    parked.park(("app", "0_0"), _Held(TaskLease.acquire(tmp_path / "0_0")))
    deadline = time.monotonic() + 5
    while len(parked) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(parked) == 0
    TaskLease.acquire(tmp_path / "0_0", timeout_s=0.5).release()  # free without asking anyone


def test_opening_a_task_waits_task_timeout_ms_for_an_unreachable_cluster(broker, counting):
    topology, config, names = counting
    cut_off = StreamsConfig({**config.originals, "bootstrap.servers": f"127.0.0.1:{free_port()}",
                             "processing.guarantee": "at_least_once", "task.timeout.ms": 8000})
    task = OpenTask(topology, cut_off, TaskId(0, 0), (names["source"],), "cut off")
    started = time.monotonic()
    try:
        with pytest.raises(BrokerUnavailableError, match=r"task\.timeout\.ms=8000"):
            task.open([(names["source"], 0)])
        assert 8 <= time.monotonic() - started < 20  # asked again until the key's bound, not one 5 s ask
    finally:
        task.close()
