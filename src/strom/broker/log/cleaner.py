"""Log compaction for `cleanup.policy=compact`: keep the latest record of every key.

Only closed segments are cleaned, and only records older than `min.compaction.lag.ms`; a run
happens when at least `min.cleanable.dirty.ratio` of their records can go, or when one of them is
older than `max.compaction.lag.ms`. Offsets
never change: a batch keeps its base offset and its records their offsets; batches that lose no
record are kept byte for byte. Records of aborted transactions are dropped, and nothing at or
above the last stable offset is cleaned (an open transaction may still abort). Tombstones (null
values) are kept until `delete.retention.ms` after their timestamp, so consumers that are behind
still see the delete. A cleaned segment is written beside the old one and swapped in; a crash
mid-swap leaves a log without indexes, which the next start rebuilds.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import weakref

from strom.broker.log.partition import Partition
from strom.broker.log.records import (
    BatchHeader,
    CorruptBatchError,
    Record,
    empty_batch,
    encode_batch,
    iter_records,
)
from strom.broker.log.segment import Segment
from strom.broker.producer_state import AbortedRanges

log = logging.getLogger(__name__)

# partition -> (log end offset, time) of its last cleaning run
_last_run: weakref.WeakKeyDictionary[Partition, tuple[int, int]] = weakref.WeakKeyDictionary()


def clean(partition: Partition, now_ms: int | None = None) -> int:
    """Compacts the partition's closed segments; returns how many records were removed."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    closed = partition.segments[:-1]
    lag = partition.config["min.compaction.lag.ms"]
    stable = partition.last_stable_offset()  # records of open transactions may still be aborted
    cleanable = [s for s in closed if s.batch_count and s.largest_timestamp <= now_ms - lag
                 and s.next_offset <= stable]
    if not cleanable:
        return 0
    leo = partition.log_end_offset
    last = _last_run.get(partition)
    if last is not None and last[0] == leo and now_ms - last[1] < partition.config["delete.retention.ms"]:
        return 0  # nothing new since the last run, and no tombstone can have expired yet
    _last_run[partition] = (leo, now_ms)
    aborted = partition.producer_state.aborted_ranges()
    latest = _latest_offsets(partition, stable, aborted)
    tombstone_horizon = now_ms - partition.config["delete.retention.ms"]
    overdue = any(s.largest_timestamp < now_ms - partition.config["max.compaction.lag.ms"] for s in cleanable)
    dirty = _removable_ratio(cleanable, latest, tombstone_horizon, aborted)
    if dirty < partition.config["min.cleanable.dirty.ratio"] and not overdue:
        return 0
    removed = 0
    for segment in cleanable:
        removed += _clean_segment(partition, segment, latest, tombstone_horizon, aborted)
    if removed:
        log.info("%s-%d: compaction removed %d record(s)", partition.topic, partition.index, removed)
    return removed


def _removable_ratio(segments: list[Segment], latest: dict[bytes, int], horizon: int,
                     aborted: AbortedRanges) -> float:
    """Fraction of the records in `segments` that compaction would remove."""
    total = removable = 0
    for segment in segments:
        for i in range(segment.batch_count):
            batch = segment.batch_at(i)
            header = BatchHeader.parse(batch)
            if header.is_control:
                continue
            total += header.records_count
            if aborted.contains(header):
                removable += header.records_count
                continue
            removable += sum(1 for r in _records(batch) or ()
                             if r.key is not None and not _survives(r, latest, horizon))
    return removable / total if total else 0.0


def _latest_offsets(partition: Partition, stable: int, aborted: AbortedRanges) -> dict[bytes, int]:
    """Offset of the latest committed record of every key below the last stable offset."""
    latest: dict[bytes, int] = {}
    for base_offset, batch in partition.iter_batches(partition.log_start_offset):
        if base_offset >= stable:
            break
        header = BatchHeader.parse(batch)
        if header.is_control or aborted.contains(header):
            continue
        for record in _records(batch) or ():
            if record.key is not None:
                latest[record.key] = record.offset
    return latest


def _clean_segment(partition: Partition, segment: Segment, latest: dict[bytes, int], horizon: int,
                   aborted: AbortedRanges) -> int:
    work = partition.directory / "cleaning"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    cleaned = Segment(work, segment.base_offset)
    removed = 0
    for i in range(segment.batch_count):
        batch = segment.batch_at(i)
        header = BatchHeader.parse(batch)
        kept_batch, dropped = (None, header.records_count) if aborted.contains(header) else \
            _compact_batch(header, batch, latest, horizon)
        if kept_batch is None and i == segment.batch_count - 1:
            kept_batch = empty_batch(header)  # the segment keeps its end offset: fetches never stall in a gap
        removed += dropped
        if kept_batch is not None:
            cleaned.append(header.base_offset, BatchHeader.parse(kept_batch), kept_batch)
    cleaned.close()
    if removed:
        _swap(partition, segment, cleaned)
    shutil.rmtree(work, ignore_errors=True)
    return removed


def _compact_batch(header: BatchHeader, batch: bytes, latest: dict[bytes, int],
                   horizon: int) -> tuple[bytes | None, int]:
    """The batch without superseded records and expired tombstones, and how many were dropped."""
    records = None if header.is_control else _records(batch)
    if records is None:
        return batch, 0
    kept = [r for r in records if r.key is None or _survives(r, latest, horizon)]
    if len(kept) == len(records):
        return batch, 0
    if not kept:
        return None, len(records)
    return encode_batch(kept, header.base_offset, header.attributes, header.producer_id,
                        header.producer_epoch, header.base_sequence), len(records) - len(kept)


def _records(batch: bytes) -> list[Record] | None:
    """The batch's records, or None for a batch that cannot be read (stored before appends were
    checked): the cleaner keeps it as it is and cleans around it."""
    try:
        return list(iter_records(batch))
    except CorruptBatchError as exc:
        offset = BatchHeader.parse(batch).base_offset
        log.warning("compaction keeps the unreadable batch at offset %d as it is: %s", offset, exc)
        return None


def _survives(record: Record, latest: dict[bytes, int], horizon: int) -> bool:
    """Latest value of its key, unless it is a tombstone older than delete.retention.ms."""
    expired_tombstone = record.value is None and record.timestamp < horizon
    return latest.get(record.key or b"") == record.offset and not expired_tombstone


def _swap(partition: Partition, old: Segment, cleaned: Segment) -> None:
    old.release()
    old.delete_indexes()
    os.replace(cleaned.log_path, old.log_path)
    replacement = Segment.open(partition.directory, old.base_offset, recover=True)
    partition.segments[partition.segments.index(old)] = replacement
