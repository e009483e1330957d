"""One log segment: a file of record batches plus its offset index and time index.

Files: ``<base offset>.log`` (batches back to back, as clients sent them), ``.index`` (per batch: last
offset relative to the base, position) and ``.timeindex`` (per batch: largest timestamp so far,
relative last offset). Indexes are kept in memory and written when the segment is rolled, flushed
or closed; an index that does not match its log is rebuilt by scanning the log.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import time
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, ClassVar

from crc32c import crc32c

from strom.broker.log.records import CRC_START, HEADER_SIZE, MAX_RELATIVE_OFFSET, BatchHeader, set_base_offset

log = logging.getLogger(__name__)

_INDEX_ENTRY = struct.Struct(">Ii")


@dataclass(frozen=True, slots=True)
class FileRange:
    """`length` bytes at `position` of an open segment file (sent to clients with sendfile)."""

    file: BinaryIO
    position: int
    length: int

    def read(self) -> bytes:
        return os.pread(self.file.fileno(), self.length, self.position)

_TIME_ENTRY = struct.Struct(">qI")


class Segment:
    """Append-only batch file with dense in-memory indexes (one entry per batch)."""

    open_files: ClassVar[int] = 0  # descriptors of segment files open in this process

    def __init__(self, directory: Path, base_offset: int) -> None:
        self.base_offset = base_offset
        self.log_path = directory / f"{base_offset:020d}.log"
        self.index_path = self.log_path.with_suffix(".index")
        self.time_index_path = self.log_path.with_suffix(".timeindex")
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        Segment.open_files += 1
        self.size = os.fstat(self._fd).st_size
        self.last_offsets = array("q")
        self.positions = array("q")
        self.max_timestamps = array("q")  # running maximum, so it is sorted
        self.created = time.time()
        self._indexed_entries = 0  # entries already in the index files
        self._reader: BinaryIO | None = None

    # ---- opening ------------------------------------------------------------------------------
    @classmethod
    def open(cls, directory: Path, base_offset: int, recover: bool) -> Segment:
        """Opens an existing segment; `recover` scans it and truncates a torn or corrupt tail."""
        segment = cls(directory, base_offset)
        if recover or not segment._load_indexes():
            segment._scan()
        return segment

    def _load_indexes(self) -> bool:
        try:
            index = self.index_path.read_bytes()
            times = self.time_index_path.read_bytes()
        except FileNotFoundError:
            return self.size == 0
        count = len(index) // _INDEX_ENTRY.size
        if count * _TIME_ENTRY.size != len(times) or count * _INDEX_ENTRY.size != len(index):
            return False
        for i in range(count):
            rel, position = _INDEX_ENTRY.unpack_from(index, i * _INDEX_ENTRY.size)
            ts, _ = _TIME_ENTRY.unpack_from(times, i * _TIME_ENTRY.size)
            self.last_offsets.append(self.base_offset + rel)
            self.positions.append(position)
            self.max_timestamps.append(ts)
        if count and not self._last_batch_matches_index():
            log.warning("%s: the log does not end where its index says; rebuilding the index by scanning",
                        self.log_path)
            self._clear()
            return False
        self._indexed_entries = count
        return True

    def _last_batch_matches_index(self) -> bool:
        """Whether the indexed last batch is in the file, intact, and ends the file (a closed segment
        cut short or overwritten must not be served through its old index)."""
        position = self.positions[-1]
        if position + HEADER_SIZE > self.size:
            return False
        header = BatchHeader.parse(self.read(position, HEADER_SIZE))
        return (header.magic == 2 and position + header.length == self.size
                and header.last_offset == self.last_offsets[-1]
                and crc32c(self.read(position + CRC_START, header.length - CRC_START)) == header.crc)

    def _clear(self) -> None:
        del self.last_offsets[:], self.positions[:], self.max_timestamps[:]

    def _scan(self) -> None:
        """Rebuilds the indexes from the log and cuts it after the last intact batch."""
        self._clear()
        valid = 0
        if self.size:
            with mmap.mmap(self._fd, self.size, access=mmap.ACCESS_READ) as data:
                while self.size - valid >= HEADER_SIZE:
                    header = BatchHeader.parse(data, valid)
                    end = valid + header.length
                    if (header.magic != 2 or header.length < HEADER_SIZE or end > self.size
                            or crc32c(data[valid + CRC_START:end]) != header.crc):
                        break
                    relative = header.last_offset - self.base_offset
                    if not 0 <= relative <= MAX_RELATIVE_OFFSET or header.last_offset_delta < 0:
                        log.warning("%s: batch at byte %d ends at offset %d, beyond what one segment can "
                                    "index; the log is cut there (such batches are refused since)",
                                    self.log_path, valid, header.last_offset)
                        break
                    self._index(header.last_offset, valid, header.max_timestamp)
                    valid = end
        if valid != self.size:
            log.warning("%s: truncating %d bytes of torn or corrupt tail", self.log_path, self.size - valid)
            os.ftruncate(self._fd, valid)
            self.size = valid
        self._indexed_entries = 0
        self.write_indexes()

    # ---- writing ------------------------------------------------------------------------------
    def append(self, base_offset: int, header: BatchHeader, batch: memoryview | bytes) -> None:
        """Writes a batch under `base_offset` without copying its body."""
        position = self.size
        try:
            written = os.writev(self._fd, [set_base_offset(base_offset), memoryview(batch)[8:]])
            while written < len(batch):  # a short write: the next one says why (ENOSPC, EFBIG, ...)
                written += os.write(self._fd, memoryview(batch)[written:])
        except OSError as exc:
            os.ftruncate(self._fd, position)  # no partial batch stays behind (disk full, ...)
            if exc.filename is None:
                exc.filename = str(self.log_path)
            raise
        self.size += written
        self._index(base_offset + header.last_offset_delta, position, header.max_timestamp)

    def _index(self, last_offset: int, position: int, max_timestamp: int) -> None:
        if self.max_timestamps and max_timestamp < self.max_timestamps[-1]:
            max_timestamp = self.max_timestamps[-1]
        self.last_offsets.append(last_offset)
        self.positions.append(position)
        self.max_timestamps.append(max_timestamp)

    def write_indexes(self) -> None:
        """Appends index entries not yet on disk."""
        start = self._indexed_entries
        count = len(self.positions)
        if start == count and self.index_path.exists():
            return
        index = bytearray()
        times = bytearray()
        for i in range(start, count):
            index += _INDEX_ENTRY.pack(self.last_offsets[i] - self.base_offset, self.positions[i])
            times += _TIME_ENTRY.pack(self.max_timestamps[i], self.last_offsets[i] - self.base_offset)
        mode = "ab" if start else "wb"
        with open(self.index_path, mode) as f:
            f.write(index)
        with open(self.time_index_path, mode) as f:
            f.write(times)
        self._indexed_entries = count

    def flush(self) -> None:
        os.fsync(self._fd)
        self.write_indexes()

    def close(self) -> None:
        """Flushes and closes the file; it is closed even if the flush fails (and that is raised)."""
        try:
            if self._fd >= 0:
                self.flush()
        finally:
            self.release()

    def release(self) -> None:
        """Closes the file without flushing (before the file is replaced or deleted)."""
        # The reader is not closed here: a Fetch may still be sending from it, and a closed fd
        # could be reused by another file mid-sendfile. It closes when the last FileRange goes.
        self._reader = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            Segment.open_files -= 1

    def delete_indexes(self) -> None:
        self.index_path.unlink(missing_ok=True)
        self.time_index_path.unlink(missing_ok=True)

    def delete(self) -> None:
        self.release()
        self.delete_indexes()
        self.log_path.unlink(missing_ok=True)

    # ---- reading ------------------------------------------------------------------------------
    @property
    def next_offset(self) -> int:
        return self.last_offsets[-1] + 1 if self.last_offsets else self.base_offset

    @property
    def batch_count(self) -> int:
        return len(self.positions)

    @property
    def largest_timestamp(self) -> int:
        return self.max_timestamps[-1] if self.max_timestamps else -1

    def locate(self, offset: int, max_bytes: int, end_offset: int,
               at_least_one: bool = True) -> tuple[int, int]:
        """File range (position, length) of whole batches from the one holding `offset`, up to
        `max_bytes` (but at least one batch if `at_least_one`) and only batches that end before
        `end_offset`."""
        first = bisect_left(self.last_offsets, offset)
        stop = bisect_left(self.last_offsets, end_offset, lo=first)
        if first >= stop:
            return self.size, 0
        start = self.positions[first]
        limit = start + max_bytes
        # batches first..last-1 end at or before the limit (a batch ends where the next starts)
        last = bisect_right(self.positions, limit, first + 1, stop) - 1
        if not (last == stop - 1 and self._end_of(last) <= limit):
            last -= 1
        if last < first and not at_least_one:
            return start, 0
        return start, self._end_of(max(last, first)) - start

    def _end_of(self, i: int) -> int:
        return self.positions[i + 1] if i + 1 < len(self.positions) else self.size

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def file_range(self, position: int, length: int) -> FileRange:
        if self._reader is None:
            self._reader = open(self.log_path, "rb", buffering=0)  # noqa: SIM115 - see release()
        return FileRange(self._reader, position, length)

    def batch_at(self, i: int) -> bytes:
        return self.read(self.positions[i], self._end_of(i) - self.positions[i])

    def first_batch_reaching(self, timestamp: int) -> int:
        """Index of the first batch whose largest timestamp is >= `timestamp` (batch_count if none)."""
        return bisect_left(self.max_timestamps, timestamp)
