"""Inner window and session stores over bytes: the bottom layer, segmented by time, with retention.

Both follow Kafka Streams: records older than stream time minus retention (window start for window
stores, session end for session stores) are skipped on write and hidden on read; whole segments are
dropped once expired. In memory and RocksDB differ only in their segments.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from strom.streams.state.window import schemas
from strom.streams.state.window.segments import (
    Segment,
    Segments,
    default_segment_interval,
    in_memory_segments,
    rocksdb_segments,
)

MAX = schemas.MAX_TIMESTAMP


class SegmentedBytesStore:
    """Binary records placed in segments by their record time, with expiry by observed stream time."""

    def __init__(self, name: str, retention_ms: int, segment_interval_ms: int | None, persistent: bool,
                 record_time: Callable[[bytes], int]) -> None:
        self._name = name
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms or default_segment_interval(retention_ms)
        self._persistent = persistent
        self._record_time = record_time
        self._segments: Segments | None = None
        self.observed_stream_time = -1
        self.expired_records = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def persistent(self) -> bool:
        return self._persistent

    @property
    def is_open(self) -> bool:
        return self._segments is not None

    def open(self, state_dir: str | None) -> None:
        """Open the segments; persistent stores live under ``state_dir`` and reopen what is on disk."""
        if self._persistent:
            if state_dir is None:
                raise ValueError(f"persistent store {self._name!r} needs a state directory")
            self._segments = rocksdb_segments(os.path.join(state_dir, "rocksdb"), self._name,
                                              self.retention_ms, self.segment_interval_ms)
        else:
            self._segments = in_memory_segments(self.retention_ms, self.segment_interval_ms)

    def put_binary(self, binary_key: bytes, value: bytes | None) -> bool:
        """Write (or delete, value None) one record; False when it is already expired and skipped."""
        segments = self._open_segments()
        record_time = self._record_time(binary_key)
        self.observed_stream_time = max(self.observed_stream_time, record_time)
        if record_time <= self.observed_stream_time - self.retention_ms:
            self.expired_records += 1
            return False
        segment_id = segments.segment_id(record_time)
        if value is None:
            segment = segments.get(segment_id)
            if segment is not None:
                segment.delete(binary_key)
        else:
            segment = segments.get_or_create_if_live(segment_id, self.observed_stream_time)
            if segment is None:
                self.expired_records += 1
                return False
            segment.put(binary_key, value)
        segments.drop_expired(self.observed_stream_time)
        return True

    def get_binary(self, binary_key: bytes) -> bytes | None:
        record_time = self._record_time(binary_key)
        if record_time < self.min_live_time():
            return None
        segment = self._open_segments().get(self._open_segments().segment_id(record_time))
        return None if segment is None else segment.get(binary_key)

    def min_live_time(self) -> int:
        """Oldest record time still visible: reads hide what retention has expired."""
        return max(0, self.observed_stream_time - self.retention_ms + 1)

    def scan(self, time_from: int, time_to: int, lo: bytes | None, hi: bytes | None,
             reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        """Raw records of the segments covering [time_from, time_to] whose keys lie in [lo, hi]."""
        time_from = max(time_from, self.min_live_time())
        if time_from > time_to:
            return
        for segment in self._open_segments().between(time_from, time_to, reverse):
            yield from self._segment_range(segment, lo, hi, reverse)

    @staticmethod
    def _segment_range(segment: Segment, lo: bytes | None, hi: bytes | None,
                       reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        if lo is None and hi is None:
            return segment.items(reverse)
        return segment.range(lo or b"", hi, reverse)

    def flush(self) -> None:
        self._open_segments().flush()

    def close(self) -> None:
        if self._segments is not None:
            self._segments.close()
            self._segments = None

    def _open_segments(self) -> Segments:
        if self._segments is None:
            raise RuntimeError(f"store {self._name!r} is not open")
        return self._segments


class WindowBytesStore(SegmentedBytesStore):
    """Window store over bytes; with ``retain_duplicates`` every put is kept (stream-stream joins)."""

    def __init__(self, name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool,
                 persistent: bool, segment_interval_ms: int | None = None) -> None:
        super().__init__(name, retention_ms, segment_interval_ms, persistent, schemas.window_start_of)
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
        lo = schemas.window_store_key(key, max(time_from, 0), 0)
        hi = schemas.window_store_key(key, time_to, schemas.MAX_SEQNUM)
        for binary, value in self.scan(time_from, time_to, lo, hi, reverse):
            record_key, start, _ = schemas.split_window_store_key(binary)
            if record_key == key and time_from <= start <= time_to:
                yield start, value

    def fetch_key_range(self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int,
                        reverse: bool = False) -> Iterator[tuple[bytes, int, bytes]]:
        """(key, window start, value) for keys in [key_from, key_to] (None: unbounded), segment by segment."""
        for binary, value in self.scan(time_from, time_to, key_from, None, reverse):
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
        super().__init__(name, retention_ms, segment_interval_ms, persistent, schemas.session_end_of)

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
        single = key_from is not None and key_from == key_to
        lo = schemas.session_store_key(key_from, 0, max(earliest_session_end, 0)) if single else key_from
        hi = schemas.session_store_key(key_from, MAX, MAX) if single else None
        for binary, value in self.scan(earliest_session_end, MAX, lo, hi, reverse):
            key, start, end = schemas.split_session_store_key(binary)
            if (end >= earliest_session_end and start <= latest_session_start
                    and (key_from is None or key >= key_from) and (key_to is None or key <= key_to)):
                yield key, start, end, value
