"""A partition's log: segments, offset assignment, reads, roll, flush, retention and waiters."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import struct
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crc32c import crc32c

from strom.broker.log.records import (
    CODECS,
    CRC_START,
    MAX_RELATIVE_OFFSET,
    TIMESTAMP_LOG_APPEND,
    BatchHeader,
    CorruptBatchError,
    iter_records,
    recompress,
)
from strom.broker.log.segment import FileRange, Segment
from strom.broker.producer_state import AbortedTxn, ProducerStateManager

log = logging.getLogger(__name__)


class OffsetOutOfRangeError(Exception):
    """The fetch offset is outside [log start offset, log end offset]."""


class RecordTooLargeError(Exception):
    """A batch is larger than max.message.bytes."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: FileRange | None  # whole batches, None when there is nothing to read
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[AbortedTxn]


class Partition:
    """One topic partition. `config` is the topic's live effective config (shared dict)."""

    def __init__(self, topic: str, index: int, directory: Path, config: dict[str, Any]) -> None:
        self.topic = topic
        self.index = index
        self.directory = directory
        self.config = config
        directory.mkdir(parents=True, exist_ok=True)
        self.segments: list[Segment] = self._open_segments()
        self.log_start_offset = self._read_log_start()
        self._unflushed = 0
        self._last_flush = time.monotonic()
        self._waiters: list[asyncio.Future] = []
        self._storage_error = False  # the last write failed (logged once until one succeeds)
        self.producer_state = ProducerStateManager(directory)
        self.producer_state.load(self.log_start_offset, self.log_end_offset, self.iter_batches)

    # ---- lifecycle ----------------------------------------------------------------------------
    def _open_segments(self) -> list[Segment]:
        bases = sorted(int(p.stem) for p in self.directory.glob("*.log"))
        segments = [Segment.open(self.directory, base, recover=i == len(bases) - 1)
                    for i, base in enumerate(bases)]
        return segments or [Segment(self.directory, 0)]

    def _read_log_start(self) -> int:
        path = self.directory / "log-start-offset"
        stored = int(path.read_text()) if path.exists() else 0
        return max(stored, self.segments[0].base_offset)

    def _write_log_start(self) -> None:
        path = self.directory / "log-start-offset"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(self.log_start_offset))
        tmp.replace(path)

    def release(self) -> None:
        """Closes the segment files without writing anything (a partition whose creation failed)."""
        for segment in self.segments:
            segment.release()

    def close(self) -> None:
        """Snapshots the producer state and flushes and closes every segment. Every file is closed
        even when writing fails (a full disk); the first error is raised after that."""
        errors = []
        for step in [self.producer_state.take_snapshot, *[s.close for s in self.segments]]:
            try:
                step()
            except OSError as exc:
                errors.append(exc)
        self.wake_waiters()
        if errors:
            raise errors[0]

    def delete(self) -> None:
        for segment in self.segments:
            segment.delete()
        self.wake_waiters()

    # ---- offsets ------------------------------------------------------------------------------
    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset  # single replica: everything written is committed

    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction, or the high watermark (no transactions)."""
        return self.producer_state.last_stable_offset(self.high_watermark, self.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound) for read_committed fetches."""
        return self.producer_state.aborted_transactions(fetch_offset, upper_bound)

    # ---- producer state: the one place where producer id / epoch / sequence are checked --------
    def check_producer(self, header: BatchHeader) -> int | None:
        """Validates a batch's producer id, epoch and sequence before it is written.

        Returns the base offset under which this batch was already written (a retried duplicate,
        not written again), None to write it, or raises AppendRejectedError (answered with its
        error code).
        """
        duplicate = self.producer_state.check_append(header)
        return None if duplicate is None else duplicate.first_offset

    def on_appended(self, batch: memoryview | bytes, base_offset: int) -> None:
        """Records a written batch in the producer state (idempotence and transactions)."""
        self.producer_state.on_append(batch, base_offset)

    # ---- appending ----------------------------------------------------------------------------
    def append(self, batches: list[tuple[BatchHeader, memoryview]]) -> AppendResult:
        """Assigns offsets to already validated batches and writes them, recompressed first when the
        topic's ``compression.type`` names a codec they do not use (as Kafka does)."""
        codec = CODECS.get(self.config["compression.type"])
        if codec is not None:  # transaction markers stay uncompressed, as on Kafka
            batches = [recompress(header, batch, codec)
                       if header.compression != codec and not header.is_control else (header, batch)
                       for header, batch in batches]
        max_bytes = self.config["max.message.bytes"]
        for header, _ in batches:
            if header.length > max_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.length} bytes exceeds max.message.bytes={max_bytes}")
        log_append_time = -1
        if self.config["message.timestamp.type"] == "LogAppendTime":
            log_append_time = int(time.time() * 1000)
            batches = [_stamp(header, batch, log_append_time) for header, batch in batches]
        first_offset = None
        try:
            for header, batch in batches:
                duplicate = self.check_producer(header)
                if duplicate is not None:
                    first_offset = duplicate if first_offset is None else first_offset
                    continue
                self._maybe_roll(header)
                base_offset = self.log_end_offset
                self.active.append(base_offset, header, batch)
                self.on_appended(batch, base_offset)
                first_offset = base_offset if first_offset is None else first_offset
                self._unflushed += header.records_count
            self.flush_if_due()
        except OSError as exc:
            self._storage_failed(exc)
            raise
        finally:
            self.wake_waiters()
        if self._storage_error:
            self._storage_error = False
            log.info("%s-%d: writes succeed again", self.topic, self.index)
        return AppendResult(first_offset if first_offset is not None else self.log_end_offset,
                            log_append_time)

    def _storage_failed(self, exc: OSError) -> None:
        """Logs a failed write once until a write succeeds again (producers retry it many times)."""
        if self._storage_error:
            return
        self._storage_error = True
        cause = os.strerror(exc.errno) if exc.errno else str(exc)
        advice = ("free space on that disk or move the data directory to a larger one"
                  if exc.errno == errno.ENOSPC else "check the disk and the file system")
        log.error("%s-%d: cannot write to %s on disk: %s; %s. Producers get KAFKA_STORAGE_ERROR until "
                  "a write succeeds (further failures of this partition are not logged)", self.topic,
                  self.index, exc.filename or self.active.log_path, cause, advice)

    def append_records(self, build: Callable[[int], bytes]) -> int:
        """Appends a batch the broker builds itself; `build(base_offset)` returns its bytes."""
        batch = build(self.log_end_offset)
        header = BatchHeader.parse(batch)
        return self.append([(header, memoryview(batch))]).base_offset

    def _maybe_roll(self, header: BatchHeader) -> None:
        """Rolls at segment.bytes or segment.ms, and before the batch's offsets would no longer fit
        the active segment's index (relative offsets are 31-bit, as in Kafka)."""
        active = self.active
        if not active.batch_count:
            return
        too_big = active.size + header.length > self.config["segment.bytes"]
        too_old = (time.time() - active.created) * 1000 >= self.config["segment.ms"]
        too_far = self.log_end_offset + header.last_offset_delta - active.base_offset > MAX_RELATIVE_OFFSET
        if too_big or too_old or too_far:
            self.roll()

    def roll(self) -> None:
        """Closes the active segment for writing (fsync + indexes) and starts a new one."""
        self.active.flush()
        self.segments.append(Segment(self.directory, self.log_end_offset))
        self.producer_state.take_snapshot()
        self._unflushed = 0
        self._last_flush = time.monotonic()

    def flush_if_due(self) -> None:
        """fsyncs after flush.messages records or flush.ms since the last fsync (if anything is new)."""
        if not self._unflushed:
            return
        flush_ms = self.config["flush.ms"]
        due_time = flush_ms >= 0 and (time.monotonic() - self._last_flush) * 1000 >= flush_ms
        if self._unflushed >= self.config["flush.messages"] or due_time:
            self.flush()

    def flush(self) -> None:
        self.active.flush()
        self._unflushed = 0
        self._last_flush = time.monotonic()

    # ---- waiting for data (fetch long polling) -----------------------------------------------
    def add_waiter(self, future: asyncio.Future) -> None:
        self._waiters.append(future)

    def remove_waiter(self, future: asyncio.Future) -> None:
        if future in self._waiters:
            self._waiters.remove(future)

    def wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    # ---- reading ------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, committed_only: bool,
             at_least_one: bool = True) -> ReadResult:
        """Whole batches from `offset`, up to the high watermark (or the LSO for read_committed),
        within `max_bytes` but at least one batch if `at_least_one`."""
        high_watermark = self.high_watermark
        lso = self.last_stable_offset()
        if offset < self.log_start_offset or offset > high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {high_watermark}]")
        upper = lso if committed_only else high_watermark
        records = None
        segment_index = bisect_right([s.base_offset for s in self.segments], offset) - 1
        for segment in self.segments[max(segment_index, 0):]:
            position, length = segment.locate(offset, max_bytes, upper, at_least_one)
            if length:  # compaction can leave segments without a batch at or after `offset`
                records = segment.file_range(position, length)
                break
            if position < segment.size:
                break  # the next batch is there but does not fit `max_bytes`
        aborted = self.aborted_transactions(offset, upper) if committed_only and records else []
        return ReadResult(records, high_watermark, lso, self.log_start_offset, aborted)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= `timestamp` (ListOffsets)."""
        for segment in self.segments:
            for i in range(segment.first_batch_reaching(timestamp), segment.batch_count):
                batch = segment.batch_at(i)
                header = BatchHeader.parse(batch)
                if header.is_control or header.last_offset < self.log_start_offset:
                    continue
                found = self._first_record_reaching(header, batch, timestamp)
                if found is not None:
                    return found
        return None

    def _first_record_reaching(self, header: BatchHeader, batch: bytes,
                               timestamp: int) -> tuple[int, int] | None:
        """The batch's first record at or after `timestamp` (the batch itself if its records
        cannot be read: stored before appends were checked, or under LogAppendTime)."""
        try:
            if not header.attributes & TIMESTAMP_LOG_APPEND:
                for record in iter_records(batch):
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
                return None
        except CorruptBatchError as exc:
            log.warning("%s-%d: batch at offset %d cannot be read (%s); ListOffsets answers its base "
                        "offset", self.topic, self.index, header.base_offset, exc)
        return max(header.base_offset, self.log_start_offset), header.max_timestamp

    def max_timestamp_offset(self) -> tuple[int, int]:
        """Offset and timestamp of the first record holding the partition's largest timestamp, as
        Kafka answers ListOffsets MAX_TIMESTAMP; (-1, -1) for an empty partition."""
        segments = [s for s in self.segments if s.batch_count]
        if not segments:
            return -1, -1
        segment = max(segments, key=lambda s: s.largest_timestamp)  # the first holding the maximum
        largest = segment.largest_timestamp
        for i in range(segment.first_batch_reaching(largest), segment.batch_count):
            batch = segment.batch_at(i)
            header = BatchHeader.parse(batch)
            if header.max_timestamp != largest:
                continue
            found = self._first_record_reaching(header, batch, largest)
            if found is not None:
                return found
        return segment.last_offsets[-1], largest

    def iter_batches(self, start_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        """(base offset, batch bytes) of every stored batch from `start_offset` (broker-internal reads)."""
        for segment in self.segments:
            for i in range(segment.batch_count):
                if segment.last_offsets[i] < start_offset:
                    continue
                batch = segment.batch_at(i)
                yield BatchHeader.parse(batch).base_offset, batch

    # ---- deleting -----------------------------------------------------------------------------
    def delete_records_before(self, offset: int) -> int:
        """Moves the log start offset forward (DeleteRecords); whole segments below it go."""
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [0, {self.high_watermark}]")
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._write_log_start()
            self._drop_segments_below(offset)
        return self.log_start_offset

    def _drop_segments_below(self, offset: int) -> None:
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self.segments.pop(0).delete()

    def apply_retention(self, now_ms: int) -> int:
        """Deletes closed segments past retention.ms / retention.bytes; returns how many."""
        deleted = 0
        retention_ms = self.config["retention.ms"]
        retention_bytes = self.config["retention.bytes"]
        total = sum(s.size for s in self.segments)
        active = self.active
        if active.batch_count and retention_ms >= 0 and now_ms - active.largest_timestamp > retention_ms:
            self.roll()  # an idle topic's only segment expires too, as in Kafka
        while len(self.segments) > 1:
            oldest = self.segments[0]
            expired = retention_ms >= 0 and now_ms - oldest.largest_timestamp > retention_ms
            oversize = retention_bytes >= 0 and total - oldest.size >= retention_bytes
            if not (expired or oversize):
                break
            total -= oldest.size
            self.segments.pop(0).delete()
            deleted += 1
        if self.segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
            self._write_log_start()
        if deleted:
            log.info("%s-%d: retention deleted %d segment(s)", self.topic, self.index, deleted)
        return deleted


def _stamp(header: BatchHeader, batch: memoryview, now_ms: int) -> tuple[BatchHeader, memoryview]:
    """The batch with LogAppendTime set (attributes and max timestamp rewritten, CRC recomputed)."""
    stamped = bytearray(batch)
    struct.pack_into(">h", stamped, 21, header.attributes | TIMESTAMP_LOG_APPEND)
    struct.pack_into(">q", stamped, 35, now_ms)
    struct.pack_into(">I", stamped, 17, crc32c(memoryview(stamped)[CRC_START:]))
    return BatchHeader.parse(stamped), memoryview(stamped)
