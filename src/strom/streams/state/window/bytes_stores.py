"""Inner window and session stores over bytes: the bottom layer, segmented by time, with retention.

Both follow Kafka Streams: records older than stream time minus retention (window start for window
stores, session end for session stores) are skipped on write and hidden on read; whole segments are
dropped once expired. In memory and RocksDB differ only in their segments.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from strom.errors import WindowSpecError
from strom.streams.state.base import merge_sorted
from strom.streams.state.context import ChangelogRecord, StateStore, StateStoreContext
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP, with_timestamp
from strom.streams.state.window import schemas
from strom.streams.state.window.segments import (
    InMemorySegment,
    Segment,
    Segments,
    default_segment_interval,
    in_memory_segments,
    rocksdb_segments,
)

MAX = MAX_TIMESTAMP


class SegmentedBytesStore:
    """Binary records placed in segments by their record time, with expiry by observed stream time.

    It is also the store's transaction (KIP-892 style): writes go to a buffer of pending writes that
    reads see, ``commit`` applies them to the segments and records the changelog offset, ``abort``
    drops them. Changelog replay is idempotent (records carry their full store key), so a crash
    between applying writes and recording the offset only costs a little replay.
    """

    def __init__(self, name: str, retention_ms: int, segment_interval_ms: int | None, persistent: bool,
                 record_time: Callable[[bytes], int]) -> None:
        self._name = name
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms or default_segment_interval(retention_ms)
        self._persistent = persistent
        self._record_time = record_time
        self._segments: Segments | None = None
        self._pending: dict[int, InMemorySegment] = {}
        self._offset_file: str | None = None
        self._committed_offset: int | None = None
        self._committed_stream_time = -1
        self.observed_stream_time = -1
        self.expired_records = 0
        self.logged = True
        self.timestamped = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def persistent(self) -> bool:
        return self._persistent

    @property
    def is_open(self) -> bool:
        return self._segments is not None

    def open(self, state_dir: str | None, configs: dict[str, Any] | None = None) -> None:
        """Open the segments; persistent stores live under ``state_dir`` and reopen what is on disk,
        their RocksDB options set by ``configs``' ``rocksdb.config.setter`` if any."""
        if self._persistent:
            if state_dir is None:
                raise ValueError(f"persistent store {self._name!r} needs a state directory")
            directory = os.path.join(state_dir, "rocksdb")
            self._segments = rocksdb_segments(directory, self._name, self.retention_ms,
                                              self.segment_interval_ms, configs)
            self._offset_file = os.path.join(directory, self._name, ".changelog-offset")
            # stream time survives restarts, so retention keeps holding without a restore
            self._committed_offset, self.observed_stream_time = _read_offset(self._offset_file)
            self._committed_stream_time = self.observed_stream_time
        else:
            self._segments = in_memory_segments(self.retention_ms, self.segment_interval_ms)

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        """Open for one task and register ``root`` (the outermost layer) with its state manager."""
        # hosts of bare stores (benchmarks, tools) may have no configuration, as for RocksDBStore
        self.open(str(context.state_dir), getattr(context, "app_configs", None))
        context.register_store(root, self, self.logged)

    # ---- writes and reads -----------------------------------------------------------------------
    def put_binary(self, binary_key: bytes, value: bytes | None) -> bool:
        """Buffer a write (value None deletes); False when the record is already expired and skipped."""
        segments = self._open_segments()
        record_time = self._record_time(binary_key)
        if record_time > self.observed_stream_time:
            self.observed_stream_time = record_time
        if record_time <= self.observed_stream_time - self.retention_ms:
            self.expired_records += 1
            return False
        segment_id = segments.segment_id(record_time)
        pending = self._pending.get(segment_id)
        if pending is None:
            pending = self._pending[segment_id] = InMemorySegment()
        pending.put(binary_key, value)
        return True

    def get_binary(self, binary_key: bytes) -> bytes | None:
        record_time = self._record_time(binary_key)
        if record_time < self.min_live_time():
            return None
        segments = self._open_segments()
        segment_id = segments.segment_id(record_time)
        pending = self._pending.get(segment_id)
        if pending is not None and pending.contains(binary_key):
            return pending.get(binary_key)
        segment = segments.get(segment_id)
        return None if segment is None else segment.get(binary_key)

    def min_live_time(self) -> int:
        """Oldest record time still visible: reads hide what retention has expired."""
        return max(0, self.observed_stream_time - self.retention_ms + 1)

    def _latest_time(self, time_to: int) -> int:
        """``time_to``, or the observed stream time if earlier: no record time is later (unknown: -1)."""
        stream_time = self.observed_stream_time
        return time_to if stream_time < 0 else min(time_to, stream_time)

    def scan(self, time_from: int, time_to: int, lo: bytes | None, hi: bytes | None,
             reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        """Records of the segments covering [time_from, time_to] whose keys lie in [lo, hi], in
        segment order and key order within a segment; pending writes included."""
        time_from = max(time_from, self.min_live_time())
        if time_from > time_to:
            return
        segments = self._open_segments()
        low, high = segments.segment_id(time_from), segments.segment_id(max(time_to, 0))
        ids = segments.ids_between(time_from, time_to) | {s for s in self._pending if low <= s <= high}
        for segment_id in sorted(ids, reverse=reverse):
            segment = segments.get(segment_id)
            committed = iter(()) if segment is None else _range(segment, lo, hi, reverse)
            pending = self._pending.get(segment_id)
            if pending is None:
                yield from committed
            else:
                yield from merge_sorted(committed, _range(pending, lo, hi, reverse), reverse)

    def committed_reader(self) -> SegmentedBytesStore:
        """A copy of this store without its pending writes, at its committed stream time: it reads the
        committed state from another thread (interactive queries) while the task goes on writing."""
        reader = copy.copy(self)
        reader._pending, reader.observed_stream_time = {}, self._committed_stream_time
        return reader

    # ---- StoreTransaction -----------------------------------------------------------------------
    @property
    def committed_offset(self) -> int | None:
        return self._committed_offset

    def commit(self, changelog_offset: int | None) -> None:
        """Apply pending writes to the segments, drop expired segments, then record the offset."""
        segments = self._open_segments()
        for segment_id in sorted(self._pending):
            self._apply(segments, segment_id, self._pending[segment_id].writes())
        self._pending.clear()
        segments.drop_expired(self.observed_stream_time)
        self._committed_stream_time = self.observed_stream_time
        if changelog_offset is not None:
            self._committed_offset = changelog_offset
            if self._offset_file is not None:
                _write_offset(self._offset_file, changelog_offset, self.observed_stream_time)

    def abort(self) -> None:
        self._pending.clear()
        self.observed_stream_time = self._committed_stream_time

    def restore(self, records: Sequence[ChangelogRecord]) -> None:
        """Write committed changelog records straight into the segments."""
        segments = self._open_segments()
        writes: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for key, value, _, timestamp in records:
            record_time = self._record_time(key)
            self.observed_stream_time = max(self.observed_stream_time, record_time)
            if record_time > self.observed_stream_time - self.retention_ms:
                if self.timestamped and value is not None:
                    value = with_timestamp(timestamp, value)
                writes.setdefault(segments.segment_id(record_time), []).append((key, value))
        for segment_id in sorted(writes):
            self._apply(segments, segment_id, writes[segment_id])
        segments.drop_expired(self.observed_stream_time)
        self._committed_stream_time = self.observed_stream_time
        if records:
            self._committed_offset = records[-1][2] + 1
            if self._offset_file is not None:
                _write_offset(self._offset_file, self._committed_offset, self.observed_stream_time)

    def wipe(self) -> None:
        self._open_segments().destroy_all()
        self._pending.clear()
        self.observed_stream_time = self._committed_stream_time = -1
        self._committed_offset = None
        if self._offset_file is not None and os.path.exists(self._offset_file):
            os.remove(self._offset_file)

    def _apply(self, segments: Segments, segment_id: int,
               writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write to a live segment; writes to a segment stream time has expired are dropped with it."""
        segment = segments.get_or_create_if_live(segment_id, self.observed_stream_time)
        if segment is not None:
            segment.write_all(writes)

    def flush(self) -> None:
        """Writes stay pending until the task commits; nothing to do here."""

    def close(self) -> None:
        """Close the segments; uncommitted writes are dropped."""
        if self._segments is not None:
            self._segments.close()
            self._segments = None
        self._pending.clear()

    def _open_segments(self) -> Segments:
        if self._segments is None:
            raise RuntimeError(f"store {self._name!r} is not open")
        return self._segments


def _range(segment: Segment | InMemorySegment, lo: bytes | None, hi: bytes | None,
           reverse: bool) -> Iterator[tuple[bytes, Any]]:
    if lo is None and hi is None:
        return segment.items(reverse)
    return segment.range(lo or b"", hi, reverse)


def _read_offset(path: str) -> tuple[int | None, int]:
    """(changelog offset, stream time) recorded at the last commit; (None, -1) if never committed."""
    try:
        with open(path) as file:
            offset, stream_time = file.read().split()
            return int(offset), int(stream_time)
    except FileNotFoundError:
        return None, -1


def _write_offset(path: str, offset: int, stream_time: int) -> None:
    temporary = path + ".tmp"
    with open(temporary, "w") as file:
        file.write(f"{offset} {stream_time}")
    os.replace(temporary, path)


class WindowBytesStore(SegmentedBytesStore):
    """Window store over bytes; with ``retain_duplicates`` every put is kept (stream-stream joins)."""

    def __init__(self, name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool,
                 persistent: bool, segment_interval_ms: int | None = None) -> None:
        super().__init__(name, retention_ms, segment_interval_ms, persistent, schemas.window_start_of)
        if retention_ms < window_size_ms:
            raise WindowSpecError(f"Store {name!r}: retention ({retention_ms} ms) must be at least the "
                                  f"window size ({window_size_ms} ms). Increase the retention.")
        self.window_size_ms = window_size_ms
        self.retain_duplicates = retain_duplicates
        self._seqnum = 0

    def put(self, key: bytes, value: bytes | None, window_start: int) -> bytes | None:
        """Store ``value`` for the window of ``key`` starting at ``window_start``; returns the store
        key written (the changelog key), or None when nothing was written."""
        if self.retain_duplicates:
            if value is None:
                return None
            self._seqnum = (self._seqnum + 1) & schemas.MAX_SEQNUM
        binary = schemas.window_store_key(key, window_start, self._seqnum)
        return binary if self.put_binary(binary, value) else None

    def fetch(self, key: bytes, window_start: int) -> bytes | None:
        return self.get_binary(schemas.window_store_key(key, window_start, 0))

    def fetch_range(self, key: bytes, time_from: int, time_to: int,
                    reverse: bool = False) -> Iterator[tuple[int, bytes]]:
        """(window start, value) of ``key``'s windows starting in [time_from, time_to]."""
        time_from = max(time_from, self.min_live_time())
        lo = schemas.window_store_key(key, time_from, 0)
        hi = schemas.window_store_key(key, time_to, schemas.MAX_SEQNUM)
        for binary, value in self.scan(time_from, time_to, lo, hi, reverse):
            record_key, start, _ = schemas.split_window_store_key(binary)
            if record_key == key and time_from <= start <= time_to:
                yield start, value

    def fetch_key_range(self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int,
                        reverse: bool = False) -> Iterator[tuple[bytes, int, bytes]]:
        """(key, window start, value) for keys in [key_from, key_to] (None: unbounded), segment by segment."""
        time_from = max(time_from, self.min_live_time())
        hi = None if key_to is None else schemas.window_key_upper_bound(key_to, self._latest_time(time_to))
        for binary, value in self.scan(time_from, time_to, key_from, hi, reverse):
            record_key, start, _ = schemas.split_window_store_key(binary)
            if (time_from <= start <= time_to and (key_from is None or record_key >= key_from)
                    and (key_to is None or record_key <= key_to)):
                yield record_key, start, value

    def all(self, reverse: bool = False) -> Iterator[tuple[bytes, int, bytes]]:
        return self.fetch_key_range(None, None, 0, MAX, reverse)


class SessionBytesStore(SegmentedBytesStore):
    """Session store over bytes, segmented and expired by session end."""

    def __init__(self, name: str, retention_ms: int, persistent: bool,
                 segment_interval_ms: int | None = None) -> None:
        # a session's end is inclusive and it closes once its end < stream time - gap - grace: with the
        # default retention (gap + grace) it must stay visible while end == stream time - retention, one
        # millisecond longer than a window store keeps a window start (Kafka drops whole segments only)
        super().__init__(name, retention_ms + 1, segment_interval_ms, persistent, schemas.session_end_of)

    def put(self, key: bytes, start: int, end: int, value: bytes | None) -> bytes | None:
        """Store (or remove, value None) a session; returns the store key written or None if expired."""
        binary = schemas.session_store_key(key, start, end)
        return binary if self.put_binary(binary, value) else None

    def fetch_session(self, key: bytes, start: int, end: int) -> bytes | None:
        return self.get_binary(schemas.session_store_key(key, start, end))

    def find_sessions(self, key_from: bytes | None, key_to: bytes | None, earliest_session_end: int,
                      latest_session_start: int,
                      reverse: bool = False) -> Iterator[tuple[bytes, int, int, bytes]]:
        """(key, start, end, value) of sessions with end >= earliest_session_end and
        start <= latest_session_start, for keys in [key_from, key_to] (None: unbounded)."""
        earliest_session_end = max(earliest_session_end, self.min_live_time())
        single = key_from is not None and key_from == key_to
        lo = schemas.session_store_key(key_from, 0, max(earliest_session_end, 0)) if single else key_from
        latest_end = self._latest_time(MAX)
        if single:
            hi: bytes | None = schemas.session_store_key(key_from, MAX, latest_end)
        else:
            hi = None if key_to is None else schemas.session_key_upper_bound(key_to, latest_end)
        for binary, value in self.scan(earliest_session_end, MAX, lo, hi, reverse):
            key, start, end = schemas.split_session_store_key(binary)
            if (end >= earliest_session_end and start <= latest_session_start
                    and (key_from is None or key >= key_from) and (key_to is None or key <= key_to)):
                yield key, start, end, value
