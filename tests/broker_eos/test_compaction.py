"""Log compaction of a partition written by transactions: aborted records never win a key."""

from __future__ import annotations

import time
from pathlib import Path

from strom.broker.config import BrokerConfig
from strom.broker.log import cleaner
from strom.broker.log.partition import Partition
from strom.broker.log.records import ATTR_TRANSACTIONAL, BatchHeader, build_batch, iter_records
from strom.broker.transactions.markers import control_batch


def _partition(path: Path) -> Partition:
    config = BrokerConfig().topic_defaults()
    config.update({"cleanup.policy": "compact", "min.compaction.lag.ms": 0})
    return Partition("changelog", 0, path, config)


def _txn(partition: Partition, pid: int, seq: int, records, commit: bool | None) -> None:
    now = int(time.time() * 1000)
    partition.append_records(lambda base: build_batch(records, now, base, ATTR_TRANSACTIONAL, pid, 0, seq))
    if commit is not None:
        partition.append_records(lambda base: control_batch(pid, 0, commit, 0, now, base))


def _committed_view(partition: Partition) -> dict[bytes, bytes]:
    """What a read_committed consumer restoring the changelog ends up with."""
    view: dict[bytes, bytes] = {}
    offset = partition.log_start_offset
    while offset < partition.last_stable_offset():
        read = partition.read(offset, 1 << 30, committed_only=True)
        aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in read.aborted]
        data = read.records.read() if read.records is not None else b""
        position = 0
        while position < len(data):
            header = BatchHeader.parse(data, position)
            batch = data[position:position + header.length]
            position += header.length
            offset = header.last_offset + 1
            dropped = any(pid == header.producer_id and first <= header.base_offset <= last
                          for pid, first, last in aborted)
            if not (header.is_control or dropped):
                view.update({r.key: r.value for r in iter_records(batch)})
    return view


def test_compaction_keeps_committed_values_over_aborted_and_open_ones(tmp_path: Path) -> None:
    partition = _partition(tmp_path / "p")
    _txn(partition, 1, 0, [(b"k", b"committed"), (b"j", b"j1")], commit=True)
    _txn(partition, 1, 2, [(b"k", b"aborted")], commit=False)
    partition.roll()
    _txn(partition, 2, 0, [(b"j", b"j2")], commit=True)
    partition.roll()
    _txn(partition, 3, 0, [(b"k", b"open")], commit=None)  # still open: may abort later
    partition.roll()
    before = _committed_view(partition)

    removed = cleaner.clean(partition, int(time.time() * 1000) + 1000)

    assert removed == 2  # the aborted k and the superseded j1; the open transaction is untouched
    assert _committed_view(partition) == before == {b"k": b"committed", b"j": b"j2"}
    now = int(time.time() * 1000)
    partition.append_records(lambda base: control_batch(3, 0, False, 0, now, base))
    assert _committed_view(partition) == {b"k": b"committed", b"j": b"j2"}
