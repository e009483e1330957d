"""The partition log without a network: recovery, roll, indexes, retention, compaction, deletes."""

from __future__ import annotations

import logging
import os
import struct
import time

import pytest
from crc32c import crc32c

from strom.broker.config import BrokerConfig
from strom.broker.log import cleaner
from strom.broker.log.manager import LogManager
from strom.broker.log.partition import OffsetOutOfRangeError, Partition, RecordTooLargeError
from strom.broker.log.records import (
    TIMESTAMP_LOG_APPEND,
    BatchHeader,
    CorruptBatchError,
    build_batch,
    iter_records,
    split_batches,
)


def _config(**overrides):
    config = BrokerConfig().topic_defaults()
    config.update({k.replace("_", "."): v for k, v in overrides.items()})
    return config


def _partition(path, **overrides) -> Partition:
    return Partition("t", 0, path, _config(**overrides))


def _append(partition: Partition, records, timestamp=None):
    batch = build_batch(records, int(time.time() * 1000) if timestamp is None else timestamp)
    return partition.append(split_batches(batch)).base_offset


def _all_records(partition: Partition):
    return [r for _, batch in partition.iter_batches() for r in iter_records(batch)]


def test_offsets_are_assigned_and_batches_read_back(tmp_path):
    partition = _partition(tmp_path)
    assert _append(partition, [(b"a", b"1"), (b"b", b"2")]) == 0
    assert _append(partition, [(b"c", b"3")]) == 2
    assert partition.high_watermark == 3
    read = partition.read(2, 1 << 20, committed_only=False)
    assert [r.value for r in iter_records(read.records.read())] == [b"3"]
    with pytest.raises(OffsetOutOfRangeError):
        partition.read(4, 1 << 20, committed_only=False)


def test_read_returns_whole_batches_within_max_bytes_but_at_least_one(tmp_path):
    partition = _partition(tmp_path)
    for i in range(10):
        _append(partition, [(b"k", bytes(100) + bytes([i]))])
    one = len(partition.read(0, 1, committed_only=False).records.read())
    assert one > 100  # one whole batch even though max_bytes is 1
    three = partition.read(0, one * 3 + 5, committed_only=False).records.read()
    assert len(split_batches(three)) == 3


def test_torn_tail_is_truncated_on_recovery(tmp_path):
    partition = _partition(tmp_path)
    for i in range(5):
        _append(partition, [(b"k", b"v%d" % i)])
    partition.close()
    log_file = next(tmp_path.glob("*.log"))
    size = log_file.stat().st_size
    with open(log_file, "ab") as f:  # half of a batch, as if the process died mid-write
        f.write(build_batch([(b"k", b"torn")], 0, 5)[:30])
    reopened = _partition(tmp_path)
    assert reopened.high_watermark == 5
    assert log_file.stat().st_size == size
    assert _append(reopened, [(b"k", b"next")]) == 5


def test_corrupt_batch_in_the_active_segment_is_cut_with_everything_after(tmp_path):
    partition = _partition(tmp_path)
    for i in range(4):
        _append(partition, [(b"k", b"value-%d" % i)])
    partition.close()
    log_file = next(tmp_path.glob("*.log"))
    data = bytearray(log_file.read_bytes())
    second = BatchHeader.parse(data).length
    data[second + 70] ^= 0xFF  # flip a byte inside the second batch's records
    log_file.write_bytes(bytes(data))
    assert _partition(tmp_path).high_watermark == 1


def test_segments_roll_by_size_and_indexes_rebuild(tmp_path):
    partition = _partition(tmp_path, segment_bytes=1024)
    for i in range(50):
        _append(partition, [(b"k%d" % i, bytes(100))])
    assert len(partition.segments) > 3
    partition.close()
    for index in tmp_path.glob("*.index"):
        index.unlink()  # lost indexes are rebuilt from the logs
    reopened = _partition(tmp_path, segment_bytes=1024)
    assert reopened.high_watermark == 50
    assert [r.key for r in _all_records(reopened)] == [b"k%d" % i for i in range(50)]
    middle = reopened.read(27, 1, committed_only=False)
    assert next(iter_records(middle.records.read())).offset == 27


def test_retention_by_bytes_and_by_time(tmp_path):
    partition = _partition(tmp_path / "bytes", segment_bytes=1024, retention_bytes=2048)
    for i in range(60):
        _append(partition, [(b"k", bytes(100) + bytes([i]))])
    partition.apply_retention(int(time.time() * 1000))
    assert sum(s.size for s in partition.segments[:-1]) <= 2048
    assert partition.log_start_offset > 0
    with pytest.raises(OffsetOutOfRangeError):
        partition.read(0, 1024, committed_only=False)

    old = _partition(tmp_path / "time", segment_bytes=1024, retention_ms=60_000)
    now = int(time.time() * 1000)
    for _ in range(30):
        _append(old, [(b"k", bytes(100))], timestamp=now - 3_600_000)
    for _ in range(30):
        _append(old, [(b"k", bytes(100))], timestamp=now)
    old.apply_retention(now)
    assert all(r.timestamp == now for r in _all_records(old) if r.offset >= old.log_start_offset)
    assert old.log_start_offset >= 20


def test_compaction_keeps_latest_per_key_and_offsets(tmp_path):
    partition = _partition(tmp_path, segment_bytes=1024, cleanup_policy="compact", delete_retention_ms=1000)
    now = int(time.time() * 1000)
    for round_ in range(10):
        for key in (b"a", b"b", b"c"):
            _append(partition, [(key, b"%s-%d" % (key, round_))], timestamp=now - 10_000)
    _append(partition, [(b"b", None)], timestamp=now - 10_000)  # old tombstone: removed
    _append(partition, [(b"c", None)], timestamp=now)  # fresh tombstone: kept
    for i in range(20):  # push everything above into closed segments
        _append(partition, [(b"filler-%d" % i, bytes(200))], timestamp=now)
    removed = cleaner.clean(partition, now)
    assert removed > 0
    records = _all_records(partition)
    survivors = {r.key: (r.offset, r.value) for r in records if not r.key.startswith(b"filler")}
    assert survivors[b"a"] == (27, b"a-9")
    assert b"b" not in survivors  # superseded and its tombstone expired
    assert survivors[b"c"] == (31, None)
    offsets = [r.offset for r in _all_records(partition)]
    assert offsets == sorted(offsets) and partition.high_watermark == 52
    for closed, following in zip(partition.segments, partition.segments[1:], strict=False):
        assert closed.next_offset == following.base_offset, "segments keep their end offsets (no gaps)"
    partition.close()
    assert {r.key for r in _all_records(_partition(tmp_path, segment_bytes=1024))} >= {b"a", b"c"}


def test_delete_records_moves_log_start(tmp_path):
    partition = _partition(tmp_path, segment_bytes=1024)
    for _ in range(40):
        _append(partition, [(b"k", bytes(100))])
    assert partition.delete_records_before(25) == 25
    assert partition.segments[0].base_offset <= 25
    with pytest.raises(OffsetOutOfRangeError):
        partition.read(10, 100, committed_only=False)
    partition.close()
    assert _partition(tmp_path, segment_bytes=1024).log_start_offset == 25


def test_too_large_and_corrupt_batches_are_refused(tmp_path):
    partition = _partition(tmp_path, max_message_bytes=200)
    with pytest.raises(RecordTooLargeError):
        _append(partition, [(b"k", bytes(500))])
    batch = bytearray(build_batch([(b"k", b"v")], 0))
    batch[-1] ^= 1
    with pytest.raises(CorruptBatchError):
        split_batches(bytes(batch))
    with pytest.raises(CorruptBatchError):
        split_batches(b"\0" * 10)
    assert partition.high_watermark == 0


def test_log_append_time_rewrites_timestamps(tmp_path):
    partition = _partition(tmp_path, message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    result = partition.append(split_batches(build_batch([(b"k", b"v")], 5)))
    header = BatchHeader.parse(partition.read(0, 1000, committed_only=False).records.read())
    assert header.attributes & TIMESTAMP_LOG_APPEND
    assert header.max_timestamp == result.log_append_time >= before
    assert os.path.getsize(next(tmp_path.glob("*.log"))) == header.length


def test_expired_active_segment_is_rolled_and_deleted(tmp_path):
    partition = _partition(tmp_path, retention_ms=60_000)
    now = int(time.time() * 1000)
    for _ in range(3):
        _append(partition, [(b"k", b"old")], timestamp=now - 3_600_000)
    assert partition.apply_retention(now) == 1
    assert partition.log_start_offset == partition.high_watermark == 3
    assert _append(partition, [(b"k", b"new")]) == 3


def test_compaction_waits_for_the_dirty_ratio_unless_overdue(tmp_path):
    now = int(time.time() * 1000)
    lazy = _partition(tmp_path / "lazy", segment_bytes=1024, cleanup_policy="compact",
                      min_cleanable_dirty_ratio=0.9)
    overdue = _partition(tmp_path / "overdue", segment_bytes=1024, cleanup_policy="compact",
                         min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=1000)
    for partition in (lazy, overdue):
        for i in range(40):  # half of the records are superseded: ratio 0.5 < 0.9
            _append(partition, [(b"key-%d" % (i % 20), bytes(100))], timestamp=now - 5000)
        _append(partition, [(b"tail", bytes(900))], timestamp=now)
    assert cleaner.clean(lazy, now) == 0
    assert cleaner.clean(overdue, now) > 0


def test_flush_policy_by_messages_and_time(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    by_count = _partition(tmp_path / "count", flush_messages=3)
    for _ in range(7):
        _append(by_count, [(b"k", b"v")])
    assert len(synced) == 2  # after the 3rd and the 6th record
    by_time = _partition(tmp_path / "time", flush_ms=5000)
    _append(by_time, [(b"k", b"v")])
    synced.clear()
    by_time.flush_if_due()
    assert synced == []
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + 6)  # flush.ms has passed
    by_time.flush_if_due()
    by_time.flush_if_due()  # nothing new since: no second fsync
    assert len(synced) == 1


def test_failed_write_leaves_no_partial_batch(tmp_path, monkeypatch):
    partition = _partition(tmp_path)
    _append(partition, [(b"k", b"before")])
    size = partition.active.size

    def disk_full(fd, buffers):
        os.write(fd, bytes(buffers[0]))  # part of the batch reaches the file, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "writev", disk_full)
    with pytest.raises(OSError):
        _append(partition, [(b"k", b"lost")])
    monkeypatch.undo()
    assert os.path.getsize(partition.active.log_path) == size
    assert _append(partition, [(b"k", b"after")]) == 1
    assert [r.value for r in _all_records(partition)] == [b"before", b"after"]


def test_roll_before_relative_offsets_overflow_and_recovery_of_an_overflowed_segment(tmp_path):
    from strom.broker.log.records import MAX_RELATIVE_OFFSET, set_base_offset

    def claiming(last_offset_delta: int) -> bytes:  # what an unvalidated broker once accepted
        batch = bytearray(build_batch([(b"k", b"v")], 1))
        struct.pack_into(">i", batch, 23, last_offset_delta)
        struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
        return bytes(batch)

    directory = tmp_path / "p"
    directory.mkdir()
    old = claiming(MAX_RELATIVE_OFFSET - 2)  # offsets 0 .. 2^31-3
    overflowing = set_base_offset(MAX_RELATIVE_OFFSET - 1) + claiming(MAX_RELATIVE_OFFSET)[8:]
    (directory / f"{0:020d}.log").write_bytes(old + overflowing)
    partition = _partition(directory)  # the overflowing batch is cut, the broker starts
    assert partition.log_end_offset == MAX_RELATIVE_OFFSET - 1
    base = _append(partition, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    assert base == MAX_RELATIVE_OFFSET - 1 and len(partition.segments) == 2, "rolled before overflow"
    partition.close()
    reopened = _partition(directory)
    assert reopened.log_end_offset == MAX_RELATIVE_OFFSET + 2
    assert [r.value for r in _all_records(reopened)][-3:] == [b"1", b"2", b"3"]


def _store_unchecked(partition: Partition, batch: bytes) -> None:
    """Writes a batch past the append checks, as a broker before them did."""
    partition.append([(BatchHeader.parse(batch), memoryview(batch))])


def _garbage_compressed(timestamp: int) -> bytes:
    batch = bytearray(build_batch([(b"k", b"v" * 50)], timestamp))
    struct.pack_into(">h", batch, 21, 4)  # zstd, but the records are not zstd data
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return bytes(batch)


def test_stored_undecodable_batches_break_neither_list_offsets_nor_the_cleaner(tmp_path):
    now = int(time.time() * 1000)
    with pytest.raises(CorruptBatchError):
        split_batches(_garbage_compressed(now))  # refused on append since
    partition = _partition(tmp_path, segment_bytes=1024, cleanup_policy="compact")
    _append(partition, [(b"a", b"old")], timestamp=now - 5000)
    _store_unchecked(partition, _garbage_compressed(now - 4000))
    for i in range(12):
        _append(partition, [(b"a" if i % 2 else b"b", bytes(200))], timestamp=now - 3000)
    assert partition.offset_for_timestamp(now - 4500) == (1, now - 4000)
    assert partition.offset_for_timestamp(now - 3500)[0] == 2
    assert cleaner.clean(partition, now) > 0, "the cleaner compacts around the batch it cannot read"
    kept = [BatchHeader.parse(batch).base_offset for _, batch in partition.iter_batches()]
    assert 1 in kept, "the undecodable batch is kept as it is"
    partition.close()


def test_a_truncated_closed_segment_is_rescanned_not_trusted_through_its_index(tmp_path):
    partition = _partition(tmp_path, segment_bytes=1024)
    for i in range(12):
        _append(partition, [(b"k", bytes(200) + bytes([i]))])
    assert len(partition.segments) > 2
    first = partition.segments[0]
    cut_offset = first.last_offsets[-1]
    partition.close()
    with open(first.log_path, "r+b") as log_file:  # a closed segment loses its tail (disk trouble)
        log_file.truncate(os.path.getsize(first.log_path) - 30)
    reopened = _partition(tmp_path, segment_bytes=1024)
    read = reopened.read(cut_offset, 1 << 20, committed_only=False)
    batches = split_batches(read.records.read())  # whole batches only: the consumer moves on
    assert batches and BatchHeader.parse(batches[0][1]).base_offset > cut_offset
    reopened.close()


def test_a_failing_disk_is_logged_once_per_partition_and_close_reaches_every_partition(tmp_path, monkeypatch,
                                                                                        caplog):
    caplog.set_level(logging.INFO, "strom.broker")
    logs = LogManager(tmp_path, BrokerConfig())
    logs.create_topic("a", 1)
    logs.create_topic("b", 1)
    first, second = logs.partition("a", 0), logs.partition("b", 0)
    with monkeypatch.context() as patched:
        patched.setattr(os, "writev", lambda fd, buffers: 3)  # a short write, then the disk is full
        patched.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(28, "No space left")))
        for _ in range(5):
            with pytest.raises(OSError):
                _append(first, [(b"k", b"v")])
    failures = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(failures) == 1 and "No space left on device" in failures[0].getMessage()
    assert _append(first, [(b"k", b"v")]) == 0 and "writes succeed again" in caplog.text

    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(first.producer_state, "take_snapshot", full)
    logs.close()  # the failure of a is logged, b is closed all the same
    assert "a-0 was not closed cleanly" in caplog.text
    assert all(s._fd == -1 for p in (first, second) for s in p.segments)
