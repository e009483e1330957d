"""Producer state of one partition: dedupe window, sequence gaps, fencing, LSO, aborted index, recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_eos.batches import data_batch
from broker_eos.memory_log import Log
from strom.broker.producer_state import (
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    AppendRejectedError,
    ProducerStateManager,
)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(ProducerStateManager(tmp_path / "p0"))


def test_resent_batch_is_answered_with_its_original_offset_and_not_written(log: Log) -> None:
    assert log.produce(data_batch(1, 0, 0, [b"a", b"b"])) == 0
    assert log.produce(data_batch(1, 0, 2, [b"c"])) == 2
    assert log.produce(data_batch(1, 0, 0, [b"a", b"b"])) == 0
    assert log.produce(data_batch(1, 0, 2, [b"c"])) == 2
    assert log.end == 3


def test_sequence_gap_is_out_of_order(log: Log) -> None:
    log.produce(data_batch(1, 0, 0, [b"a"]))
    with pytest.raises(AppendRejectedError) as info:
        log.produce(data_batch(1, 0, 5, [b"b"]))
    assert info.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.end == 1


def test_only_the_last_five_batches_are_deduplicated(log: Log) -> None:
    for seq in range(7):
        log.produce(data_batch(1, 0, seq, [b"x"]))
    assert log.produce(data_batch(1, 0, 2, [b"x"])) == 2
    with pytest.raises(AppendRejectedError) as info:
        log.produce(data_batch(1, 0, 1, [b"x"]))
    assert info.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_older_epoch_is_fenced_and_new_epoch_starts_at_zero(log: Log) -> None:
    log.produce(data_batch(1, 3, 0, [b"a"]))
    with pytest.raises(AppendRejectedError) as info:
        log.produce(data_batch(1, 2, 1, [b"b"]))
    assert info.value.error_code == INVALID_PRODUCER_EPOCH
    with pytest.raises(AppendRejectedError) as info:
        log.produce(data_batch(1, 4, 7, [b"b"]))
    assert info.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.produce(data_batch(1, 4, 0, [b"b"])) == 1


def test_unknown_producer_may_start_at_any_sequence(log: Log) -> None:
    assert log.produce(data_batch(9, 0, 42, [b"a"])) == 0
    assert log.produce(data_batch(9, 0, 43, [b"b"])) == 1


def test_idle_producers_expire_but_not_inside_a_transaction(log: Log) -> None:
    log.produce(data_batch(1, 0, 0, [b"idle"]))
    log.produce(data_batch(2, 0, 0, [b"open"], transactional=True))
    newest = max(p.last_timestamp for p in log.state.active_producers())
    assert log.state.remove_expired(newest + 1000, expiration_ms=500) == 1
    assert [p.producer_id for p in log.state.active_producers()] == [2]
    assert log.produce(data_batch(1, 0, 9, [b"back"])) == 2  # forgotten: any sequence is accepted


def test_sequence_wraps_after_int32_max(log: Log) -> None:
    log.produce(data_batch(1, 0, 2**31 - 2, [b"a", b"b"]))
    assert log.produce(data_batch(1, 0, 0, [b"c"])) == 2


def test_open_transaction_holds_back_the_last_stable_offset(log: Log) -> None:
    log.produce(data_batch(5, 0, 0, [b"plain"]))
    log.produce(data_batch(1, 0, 0, [b"t1"], transactional=True))
    log.produce(data_batch(2, 0, 0, [b"t2"], transactional=True))
    log.produce(data_batch(1, 0, 1, [b"t1b"], transactional=True))
    assert log.state.last_stable_offset(log.end, 0) == 1
    log.marker(1, 0, commit=True)
    assert log.state.last_stable_offset(log.end, 0) == 2
    assert log.state.last_stable_offset(log.end, 3) == 3  # records before the log start were deleted
    log.marker(2, 0, commit=True)
    assert log.state.last_stable_offset(log.end, 0) == log.end
    assert log.state.aborted_transactions(0, log.end) == []


def test_aborted_transactions_are_indexed_for_fetch(log: Log) -> None:
    log.produce(data_batch(1, 0, 0, [b"a", b"b"], transactional=True))  # 0-1
    log.produce(data_batch(2, 0, 0, [b"c"], transactional=True))  # 2
    abort1 = log.marker(1, 0, commit=False)  # 3
    log.marker(2, 0, commit=True)  # 4
    log.produce(data_batch(1, 0, 2, [b"d"], transactional=True))  # 5
    abort2 = log.marker(1, 0, commit=False)  # 6
    all_aborted = log.state.aborted_transactions(0, log.end)
    found = [(a.producer_id, a.first_offset, a.last_offset) for a in all_aborted]
    assert found == [(1, 0, abort1), (1, 5, abort2)]
    assert [a.first_offset for a in log.state.aborted_transactions(4, log.end)] == [5]
    assert [a.first_offset for a in log.state.aborted_transactions(0, 3)] == [0]
    assert log.state.aborted_transactions(7, 10) == []


def test_non_transactional_write_inside_open_transaction_is_refused(log: Log) -> None:
    log.produce(data_batch(1, 0, 0, [b"a"], transactional=True))
    with pytest.raises(AppendRejectedError) as info:
        log.produce(data_batch(1, 0, 1, [b"b"]))
    assert info.value.error_code == INVALID_TXN_STATE


def test_marker_with_bumped_epoch_fences_the_old_producer(log: Log) -> None:
    log.produce(data_batch(1, 0, 0, [b"a"], transactional=True))
    log.marker(1, 1, commit=False)
    assert log.state.last_stable_offset(log.end, 0) == log.end
    with pytest.raises(AppendRejectedError) as info:
        log.produce(data_batch(1, 0, 1, [b"zombie"], transactional=True))
    assert info.value.error_code == INVALID_PRODUCER_EPOCH
    with pytest.raises(AppendRejectedError):
        log.marker(1, 0, commit=True)


def _restart(log: Log, directory: Path, snapshot: bool) -> Log:
    if snapshot:
        log.state.take_snapshot()
    fresh = Log(ProducerStateManager(directory))
    fresh.batches, fresh.end = log.batches, log.end
    fresh.state.load(0, log.end, fresh.replay)
    return fresh


@pytest.mark.parametrize("snapshot", [True, False], ids=["clean-shutdown", "crash"])
def test_state_is_rebuilt_after_restart(tmp_path: Path, snapshot: bool) -> None:
    log = Log(ProducerStateManager(tmp_path / "p0"))
    log.produce(data_batch(1, 0, 0, [b"a"]))
    log.produce(data_batch(2, 0, 0, [b"x"], transactional=True))
    log.marker(2, 0, commit=False)
    log.state.take_snapshot()  # an older snapshot, as on a segment roll
    log.produce(data_batch(1, 0, 1, [b"b"]))
    log.produce(data_batch(2, 0, 1, [b"y"], transactional=True))
    open_txn = log.end - 1
    restarted = _restart(log, tmp_path / "p0", snapshot)
    assert restarted.produce(data_batch(1, 0, 1, [b"b"])) == 3
    with pytest.raises(AppendRejectedError):
        restarted.produce(data_batch(1, 0, 9, [b"gap"]))
    assert restarted.state.last_stable_offset(restarted.end, 0) == open_txn
    assert [(a.producer_id, a.first_offset) for a in restarted.state.aborted_transactions(0, 100)] == [(2, 1)]
    restarted.marker(2, 0, commit=False)
    assert [a.first_offset for a in restarted.state.aborted_transactions(0, 100)] == [1, open_txn]


def test_snapshot_beyond_a_truncated_log_is_discarded(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path / "p0"))
    log.produce(data_batch(1, 0, 0, [b"a"]))
    log.produce(data_batch(1, 0, 1, [b"b"]))
    log.state.take_snapshot()
    del log.batches[1:]  # a torn tail cut off by log recovery
    log.end = 1
    restarted = _restart(log, tmp_path / "p0", snapshot=False)
    assert restarted.produce(data_batch(1, 0, 1, [b"b"])) == 1
    assert not list((tmp_path / "p0").glob("00000000000000000002.snapshot"))
