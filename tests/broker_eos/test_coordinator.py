"""Transaction coordinator: ids and epochs, fencing, two-phase commit, timeouts, recovery from its log."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from strom.broker.producer_ids import ProducerIdManager
from strom.broker.transactions.coordinator import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    PRODUCER_FENCED,
    UNKNOWN_TOPIC_OR_PARTITION,
    CoordinatorError,
    TransactionCoordinator,
)
from strom.broker.transactions.metadata import TransactionMetadata, TxnState, decode_key, decode_value


class StateTopic:
    """``__transaction_state`` kept in memory: the records the coordinator appended."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes]] = []

    async def append(self, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))

    def read(self):
        return iter(self.records)

    def states(self, txn_id: str) -> list[TxnState]:
        return [decode_value(txn_id, v).state for k, v in self.records if decode_key(k) == txn_id and v]


class Partitions:
    """Partitions that receive markers; records what was written and when, and can crash."""

    def __init__(self, log: StateTopic) -> None:
        self.log = log
        self.markers: list[tuple[str, int, int, int, bool, int]] = []
        self.crash_after: int | None = None

    def partition_exists(self, topic: str, partition: int) -> bool:
        return topic != "missing"

    async def write_marker(self, topic, partition, producer_id, producer_epoch, commit, coordinator_epoch):
        if self.crash_after is not None and len(self.markers) >= self.crash_after:
            raise ConnectionError("broker crashed")
        self.markers.append((topic, partition, producer_id, producer_epoch, commit, len(self.log.records)))

    def offsets_partition(self, group_id: str) -> tuple[str, int]:
        return ("__consumer_offsets", hash(group_id) % 3)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def env(tmp_path: Path):
    log = StateTopic()
    parts = Partitions(log)
    clock = Clock()

    def coordinator() -> TransactionCoordinator:
        c = TransactionCoordinator(log, parts, ProducerIdManager(tmp_path),
                                   max_timeout_ms=60_000, clock=clock)
        c.load()
        return c

    return coordinator, log, parts, clock


def run(coro):
    return asyncio.run(coro)


def test_transactional_id_keeps_its_producer_id_and_bumps_the_epoch(env) -> None:
    make = env[0]
    c = make()
    pid, epoch = run(c.init_producer_id("app-0", 10_000))
    assert (run(c.init_producer_id("app-0", 10_000))) == (pid, epoch + 1)
    assert run(c.init_producer_id("other", 10_000))[0] != pid
    with pytest.raises(CoordinatorError) as info:
        run(c.add_partitions("app-0", pid, epoch, [("out", 0)]))
    assert info.value.error_code == PRODUCER_FENCED
    with pytest.raises(CoordinatorError) as info:
        run(c.add_partitions("app-0", pid + 100, epoch + 1, [("out", 0)]))
    assert info.value.error_code == INVALID_PRODUCER_ID_MAPPING


def test_producer_ids_never_repeat_across_restarts(tmp_path: Path) -> None:
    first = ProducerIdManager(tmp_path)
    seen = {first.allocate() for _ in range(3)}
    second = ProducerIdManager(tmp_path)  # restart (or crash) mid-block
    seen_again = {second.allocate() for _ in range(2500)}
    assert not seen & seen_again
    assert len(seen_again) == 2500


def test_timeout_above_the_broker_maximum_is_refused(env) -> None:
    c = env[0]()
    with pytest.raises(CoordinatorError) as info:
        run(c.init_producer_id("app-0", 120_000))
    assert info.value.error_code == INVALID_TRANSACTION_TIMEOUT


def test_commit_records_the_decision_before_writing_markers(env) -> None:
    make, log, parts, _ = env
    c = make()
    pid, epoch = run(c.init_producer_id("app-0", 10_000))
    run(c.add_partitions("app-0", pid, epoch, [("out", 0), ("out", 1)]))
    run(c.add_offsets("app-0", pid, epoch, "group"))
    run(c.end_txn("app-0", pid, epoch, commit=True))
    assert log.states("app-0") == [TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING,
                                   TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    prepare_written = 4
    assert sorted((m[0], m[1]) for m in parts.markers) == sorted(
        [("out", 0), ("out", 1), parts.offsets_partition("group")])
    assert all(m[2:5] == (pid, epoch, True) and m[5] == prepare_written for m in parts.markers)
    assert c.describe("app-0").state == TxnState.COMPLETE_COMMIT
    run(c.end_txn("app-0", pid, epoch, commit=True))  # a retried EndTxn succeeds without new markers
    assert len(parts.markers) == 3


def test_unknown_partition_is_reported_per_partition(env) -> None:
    c = env[0]()
    pid, epoch = run(c.init_producer_id("app-0", 10_000))
    errors = run(c.add_partitions("app-0", pid, epoch, [("missing", 0), ("out", 0)]))
    assert errors[("missing", 0)] == UNKNOWN_TOPIC_OR_PARTITION
    assert errors[("out", 0)] != 0
    assert c.describe("app-0").state == TxnState.EMPTY


def test_init_aborts_the_open_transaction_of_the_previous_producer(env) -> None:
    make, log, parts, _ = env
    c = make()
    pid, epoch = run(c.init_producer_id("app-0", 10_000))
    run(c.add_partitions("app-0", pid, epoch, [("out", 0)]))
    new_pid, new_epoch = run(c.init_producer_id("app-0", 10_000))
    assert (new_pid, new_epoch) == (pid, epoch + 2)
    assert log.states("app-0")[2:] == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT, TxnState.EMPTY]
    assert parts.markers == [("out", 0, pid, epoch + 1, False, 3)]
    with pytest.raises(CoordinatorError) as info:
        run(c.end_txn("app-0", pid, epoch, commit=True))  # the zombie cannot commit
    assert info.value.error_code == PRODUCER_FENCED


def test_expired_transaction_is_aborted_and_its_producer_fenced(env) -> None:
    make, _, parts, clock = env
    c = make()
    pid, epoch = run(c.init_producer_id("app-0", 5_000))
    run(c.add_partitions("app-0", pid, epoch, [("out", 0)]))
    clock.now += 4
    assert run(c.abort_expired()) == []
    clock.now += 2
    assert run(c.abort_expired()) == ["app-0"]
    assert parts.markers[0][:5] == ("out", 0, pid, epoch + 1, False)
    assert c.describe("app-0").state == TxnState.COMPLETE_ABORT
    with pytest.raises(CoordinatorError) as info:
        run(c.add_partitions("app-0", pid, epoch, [("out", 0)]))
    assert info.value.error_code == PRODUCER_FENCED


def test_decision_is_completed_after_a_crash(env) -> None:
    make, _, parts, _ = env
    c = make()
    pid, epoch = run(c.init_producer_id("app-0", 10_000))
    run(c.add_partitions("app-0", pid, epoch, [("out", 0), ("out", 1)]))
    parts.crash_after = 1
    with pytest.raises(ConnectionError):
        run(c.end_txn("app-0", pid, epoch, commit=True))
    parts.crash_after = None
    restarted = make()
    assert restarted.describe("app-0").state == TxnState.PREPARE_COMMIT
    with pytest.raises(CoordinatorError) as info:
        run(restarted.add_partitions("app-0", pid, epoch, [("out", 2)]))
    assert info.value.error_code == CONCURRENT_TRANSACTIONS
    run(restarted.complete_prepared())
    assert restarted.describe("app-0").state == TxnState.COMPLETE_COMMIT
    written = [(m[0], m[1], m[4]) for m in parts.markers]
    assert written == [("out", 0, True), ("out", 0, True), ("out", 1, True)]


def test_idle_transactional_ids_expire_but_open_ones_stay(env) -> None:
    make, _, _, clock = env
    c = make()
    idle_pid, _ = run(c.init_producer_id("idle", 60_000))
    pid, epoch = run(c.init_producer_id("busy", 60_000))
    run(c.add_partitions("busy", pid, epoch, [("out", 0)]))
    clock.now += 30
    assert run(c.expire_transactional_ids(20_000)) == ["idle"]
    restarted = make()
    assert restarted.describe("idle") is None
    assert restarted.describe("busy").state == TxnState.ONGOING
    new_pid, new_epoch = run(restarted.init_producer_id("idle", 60_000))
    assert new_pid != idle_pid and new_epoch == 0


def test_list_filters_by_state_and_producer(env) -> None:
    c = env[0]()
    pid, epoch = run(c.init_producer_id("a", 10_000))
    run(c.init_producer_id("b", 10_000))
    run(c.add_partitions("a", pid, epoch, [("out", 0)]))
    assert [t.transactional_id for t in c.list_transactions(states=[TxnState.ONGOING])] == ["a"]
    assert [t.transactional_id for t in c.list_transactions(producer_ids=[pid])] == ["a"]
    assert len(c.list_transactions()) == 2


def test_transaction_log_record_round_trips() -> None:
    txn = TransactionMetadata("app-7", 42, 3, 60_000, TxnState.ONGOING,
                              frozenset({("a", 0), ("a", 2), ("b", 1)}), 1234, 5678)
    assert decode_key(txn.key_bytes()) == "app-7"
    assert decode_value("app-7", txn.value_bytes()) == txn
    assert TxnState.PREPARE_COMMIT.wire_name == "PrepareCommit"
