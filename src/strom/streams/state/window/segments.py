"""Time segments of window and session stores: retention is enforced by dropping whole segments.

A segmented store keeps its records in segments of ``segment_interval_ms`` by record time (window
start, or session end). When stream time passes a segment's end by the retention period, the whole
segment is dropped, which is how Kafka Streams keeps window stores bounded. A segment is an ordered
map of binary keys: in memory (a dict with a lazily sorted key index) or one RocksDB database per segment.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import rocksdict

from strom.streams.state.key_index import SortedKeyIndex
from strom.streams.state.rocksdb import rocksdb_options

log = logging.getLogger(__name__)

MIN_SEGMENT_INTERVAL_MS = 60_000


def default_segment_interval(retention_ms: int) -> int:
    """Kafka Streams' default: half the retention, but at least one minute."""
    return max(retention_ms // 2, MIN_SEGMENT_INTERVAL_MS)


class Segment(Protocol):
    """An ordered map of binary keys."""

    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...
    def write_all(self, writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply puts and deletes (value None) at once: a task commit's writes to this segment."""
        ...

    def range(self, lo: bytes, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        """Records with lo <= key <= hi (hi None: to the end)."""
        ...

    def items(self, reverse: bool) -> Iterator[tuple[bytes, bytes]]: ...
    def close(self) -> None: ...
    def destroy(self) -> None: ...


class InMemorySegment:
    """A dict with a lazily sorted key index: O(1) lookups and writes, ordered range scans.

    Values are opaque to it, so the same structure also holds uncommitted writes, tombstones included.
    """

    def __init__(self) -> None:
        self._values: dict[bytes, Any] = {}
        self._index = SortedKeyIndex()

    def get(self, key: bytes) -> bytes | None:
        return self._values.get(key)

    def contains(self, key: bytes) -> bool:
        return key in self._values

    def put(self, key: bytes, value: bytes) -> None:
        new = key not in self._values
        self._values[key] = value
        if new:
            self._index.added(key)  # after the insert: a concurrent scan then never misses the key

    def delete(self, key: bytes) -> None:
        if self._values.pop(key, _ABSENT) is not _ABSENT:
            self._index.removed()

    def write_all(self, writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in writes:
            if value is None:
                self.delete(key)
            else:
                self.put(key, value)

    def writes(self) -> Iterable[tuple[bytes, Any]]:
        """Every key and value, tombstones included, unordered: a commit's writes need no key order
        (RocksDB orders a write batch in its memtable), and sorting 100k buffered keys per commit costs."""
        return self._values.items()

    def range(self, lo: bytes, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        return self._snapshot(self._index.between(self._values, lo, hi), reverse)

    def items(self, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        return self._snapshot(self._index.between(self._values, None, None), reverse)

    def _snapshot(self, keys: list[bytes], reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        values = self._values
        if reverse:
            keys.reverse()
        # the index may still hold removed keys: skip them
        return iter([(k, values[k]) for k in keys if k in values])

    def close(self) -> None:
        self._values.clear()
        self._index.clear()

    def destroy(self) -> None:
        self.close()


_ABSENT = object()


class RocksDBSegment:
    """One RocksDB database (raw bytes mode) per segment, as Kafka Streams' KeyValueSegment."""

    def __init__(self, path: str, options: rocksdict.Options) -> None:
        self._path = path
        self._db = rocksdict.Rdict(path, options)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value)

    def delete(self, key: bytes) -> None:
        self._db.delete(key)

    def write_all(self, writes: Iterable[tuple[bytes, bytes | None]]) -> None:
        """One atomic RocksDB write batch: about twice as fast as a put per record."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in writes:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch)

    def range(self, lo: bytes, hi: bytes | None, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        if reverse:
            records = self._db.items(backwards=True) if hi is None else self._db.items(backwards=True,
                                                                                        from_key=hi)
            for key, value in records:
                if key < lo:
                    return
                yield key, value
        else:
            for key, value in self._db.items(from_key=lo):
                if hi is not None and key > hi:
                    return
                yield key, value

    def items(self, reverse: bool) -> Iterator[tuple[bytes, bytes]]:
        yield from self._db.items(backwards=reverse)

    def close(self) -> None:
        self._db.close()

    def destroy(self) -> None:
        self._db.close()
        shutil.rmtree(self._path, ignore_errors=True)


class Segments:
    """The live segments of one store, by segment id (= record time // segment interval)."""

    def __init__(self, retention_ms: int, segment_interval_ms: int,
                 open_segment: Callable[[int], Segment]) -> None:
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms
        self._open_segment = open_segment
        self._segments: dict[int, Segment] = {}

    def segment_id(self, timestamp: int) -> int:
        return timestamp // self.segment_interval_ms

    def adopt(self, segment_id: int, segment: Segment) -> None:
        """Register a segment found on disk when the store reopens."""
        self._segments[segment_id] = segment

    def get(self, segment_id: int) -> Segment | None:
        return self._segments.get(segment_id)

    def get_or_create_if_live(self, segment_id: int, stream_time: int) -> Segment | None:
        """The segment for a write, or None when stream time has already expired it."""
        if segment_id < self.min_live_segment(stream_time):
            return None
        segment = self._segments.get(segment_id)
        if segment is None:
            segment = self._segments[segment_id] = self._open_segment(segment_id)
        return segment

    def min_live_segment(self, stream_time: int) -> int:
        return self.segment_id(stream_time - self.retention_ms + 1) if stream_time >= 0 else -(2**63)

    def drop_expired(self, stream_time: int) -> None:
        horizon = self.min_live_segment(stream_time)
        for segment_id in [s for s in self._segments if s < horizon]:
            log.debug("dropping expired segment %d (stream time %d)", segment_id, stream_time)
            self._segments.pop(segment_id).destroy()

    def ids_between(self, time_from: int, time_to: int) -> set[int]:
        low, high = self.segment_id(max(time_from, 0)), self.segment_id(max(time_to, 0))
        return {s for s in self._segments if low <= s <= high}

    def destroy_all(self) -> None:
        for segment in self._segments.values():
            segment.destroy()
        self._segments.clear()

    def close(self) -> None:
        for segment in self._segments.values():
            segment.close()
        self._segments.clear()


def in_memory_segments(retention_ms: int, segment_interval_ms: int) -> Segments:
    return Segments(retention_ms, segment_interval_ms, lambda _segment_id: InMemorySegment())


def rocksdb_segments(directory: str, store_name: str, retention_ms: int, segment_interval_ms: int,
                     configs: dict[str, Any] | None = None) -> Segments:
    """Segments under ``directory/<store>/<store>.<segment start>``, reopening those already on disk;
    ``configs``' ``rocksdb.config.setter`` is called once for the store, its options shared by every
    segment."""
    store_dir = os.path.join(directory, store_name)
    os.makedirs(store_dir, exist_ok=True)

    def path_of(segment_id: int) -> str:
        return os.path.join(store_dir, f"{store_name}.{segment_id * segment_interval_ms}")

    options = rocksdb_options(store_name, configs)  # one block cache for all segments of the store
    segments = Segments(retention_ms, segment_interval_ms,
                        lambda segment_id: RocksDBSegment(path_of(segment_id), options))
    prefix = f"{store_name}."
    for entry in sorted(os.listdir(store_dir)):
        suffix = entry[len(prefix):]
        if entry.startswith(prefix) and suffix.isdigit():
            segment_id = int(suffix) // segment_interval_ms
            segments.adopt(segment_id, RocksDBSegment(path_of(segment_id), options))
    return segments
