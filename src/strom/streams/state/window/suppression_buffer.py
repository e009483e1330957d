"""The suppression buffer: Kafka's InMemoryTimeOrderedKeyValueBuffer, logged and restored like a store.

It holds, per key, the latest update of a KTable waiting to be emitted, ordered by buffer time (the
window end for final results, the record time for rate limiting). A key keeps the buffer time and
prior value of its first buffered update (what readers of the suppressed table see meanwhile), and the
new and old value, timestamp and headers of its latest (emitted as they are, as Kafka's buffer does).
Changelog records are written at flush: the key bytes, and the buffer time, record timestamp, headers,
new, prior and old value, or a tombstone once the key is emitted.
"""

from __future__ import annotations

import copy
import heapq
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strom.streams.state.context import ChangelogRecord, StateStore, StateStoreContext

_HEADER = struct.Struct(">qqbi")  # buffer time, record timestamp, flags, length of the new value
_NEW, _PRIOR, _HEADERS = 1, 2, 4  # _HEADERS: the record's headers follow _HEADER (none in older entries)
# _WITH_OLD: the prior value has a length and the old value follows it (older entries: old is the prior)
_WITH_OLD, _OLD = 8, 16
_LENGTH = struct.Struct(">i")
ENTRY_OVERHEAD = 8 + 8 + 8 + 16


@dataclass
class BufferedRecord:
    key: Any
    new_value: Any
    prior_value: Any
    old_value: Any
    timestamp: int
    buffer_time: int
    size: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _resolve(serde: Any, default: Callable[[], Any]) -> Any:
    """The buffer's serde, asking for the task's default (which raises when there is none) only when
    ``serde`` lacks it: a windowed table's keys have the grouping's serde without any default set."""
    if serde is None:
        return default()
    if getattr(serde, "inner", True) is None:
        return serde.with_default(default())
    return serde


class TimeOrderedKeyValueBuffer:
    """A StateStore and its own StoreTransaction (in memory; restored from its changelog)."""

    def __init__(self, name: str, key_serde: Any, value_serde: Any, logged: bool = True) -> None:
        self._name = name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self.logged = logged
        self._entries: dict[bytes, BufferedRecord] = {}
        self._heap: list[tuple[int, bytes]] = []
        self._dirty: set[bytes] = set()
        self._committed: dict[bytes, BufferedRecord] = {}
        self._committed_offset: int | None = None
        self._context: StateStoreContext | None = None
        self.size_bytes = 0

    # ---- StateStore -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def persistent(self) -> bool:
        return False

    @property
    def is_open(self) -> bool:
        return self._context is not None

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self._context = context
        self._key_serde = _resolve(self._key_serde, lambda: context.key_serde)
        self._value_serde = _resolve(self._value_serde, lambda: context.value_serde)
        self._topic = context.changelog_topic(self._name)
        context.register_store(root, self, self.logged)

    def flush(self) -> None:
        """Log every key changed since the last flush: its entry, or a tombstone once emitted."""
        context = self._context
        if context is None or not self.logged:
            self._dirty.clear()
            return
        for key_bytes in sorted(self._dirty):
            entry = self._entries.get(key_bytes)
            value = None if entry is None else self._encode(entry)
            timestamp = context.record_context.timestamp if entry is None else entry.timestamp
            context.log_change(self._name, key_bytes, value, timestamp, ())
        self._dirty.clear()

    def close(self) -> None:
        self._entries.clear()
        self._heap.clear()
        self._context = None

    # ---- buffer ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def put(self, buffer_time: int, key: Any, new_value: Any, old_value: Any, timestamp: int,
            headers: Iterable[tuple[str, bytes | None]] = ()) -> None:
        key_bytes = self._key_serde.serializer().serialize(self._topic, key)
        previous = self._entries.get(key_bytes)
        prior_value = old_value
        if previous is not None:
            buffer_time, prior_value = previous.buffer_time, previous.prior_value
            self.size_bytes -= previous.size
        record = BufferedRecord(key, new_value, prior_value, old_value, timestamp, buffer_time, 0,
                                tuple((name, value) for name, value in headers))
        record.size = len(key_bytes) + len(self._encode(record)) + ENTRY_OVERHEAD
        self._add(key_bytes, record)
        self._dirty.add(key_bytes)

    def buffered(self, key: Any) -> BufferedRecord | None:
        """The update waiting for ``key``, if any (its ``prior_value`` is what readers of the suppressed
        table still see, as Kafka's ``priorValueForBuffered``)."""
        return self._entries.get(self._key_serde.serializer().serialize(self._topic, key))

    def min_timestamp(self) -> int | None:
        """Smallest buffer time, or None when empty."""
        heap = self._heap
        while heap and (heap[0][1] not in self._entries or
                        self._entries[heap[0][1]].buffer_time != heap[0][0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def evict_while(self, condition: Callable[[], bool], emit: Callable[[BufferedRecord], None]) -> None:
        """Emit and remove the oldest records (by buffer time) while ``condition()`` holds. A record is
        still buffered while ``emit`` runs, as in Kafka's buffer: what runs downstream and reads the
        suppressed table sees the key's prior value."""
        while self._entries and condition():
            self.min_timestamp()
            _, key_bytes = heapq.heappop(self._heap)
            record = self._entries[key_bytes]
            emit(record)
            del self._entries[key_bytes]
            self.size_bytes -= record.size
            self._dirty.add(key_bytes)

    def _add(self, key_bytes: bytes, record: BufferedRecord) -> None:
        self._entries[key_bytes] = record
        self.size_bytes += record.size
        heapq.heappush(self._heap, (record.buffer_time, key_bytes))

    # ---- changelog format -----------------------------------------------------------------------
    def _encode(self, record: BufferedRecord) -> bytes:
        serialize = self._value_serde.serializer().serialize
        new = serialize(self._topic, record.new_value)
        prior = serialize(self._topic, record.prior_value)
        old = serialize(self._topic, record.old_value)
        flags = (_NEW if new is not None else 0) | (_PRIOR if prior is not None else 0) | \
            (_HEADERS if record.headers else 0) | _WITH_OLD | (_OLD if old is not None else 0)
        return _HEADER.pack(record.buffer_time, record.timestamp, flags, len(new or b"")) + \
            _encode_headers(record.headers) + (new or b"") + _LENGTH.pack(len(prior or b"")) + \
            (prior or b"") + (old or b"")

    def _decode(self, key_bytes: bytes, data: bytes) -> BufferedRecord:
        buffer_time, timestamp, flags, length = _HEADER.unpack_from(data)
        headers, start = _decode_headers(data, _HEADER.size) if flags & _HEADERS else ((), _HEADER.size)
        deserialize = self._value_serde.deserializer().deserialize
        new = deserialize(self._topic, data[start:start + length]) if flags & _NEW else None
        start += length
        if flags & _WITH_OLD:
            (length,), start = _LENGTH.unpack_from(data, start), start + _LENGTH.size
            old = deserialize(self._topic, data[start + length:]) if flags & _OLD else None
        else:
            length = len(data) - start
        prior = deserialize(self._topic, data[start:start + length]) if flags & _PRIOR else None
        if not flags & _WITH_OLD:
            old = prior
        key = self._key_serde.deserializer().deserialize(self._topic, key_bytes)
        return BufferedRecord(key, new, prior, old, timestamp, buffer_time,
                              len(key_bytes) + len(data) + ENTRY_OVERHEAD, headers)

    # ---- StoreTransaction -----------------------------------------------------------------------
    @property
    def committed_offset(self) -> int | None:
        return self._committed_offset

    def commit(self, changelog_offset: int | None) -> None:
        self._committed = copy.copy(self._entries)
        if changelog_offset is not None:
            self._committed_offset = changelog_offset

    def abort(self) -> None:
        self._rebuild(dict(self._committed))

    def restore(self, records: Sequence[ChangelogRecord]) -> None:
        entries = dict(self._entries)
        for key, value, *_ in records:
            if value is None:
                entries.pop(key, None)
            else:
                entries[key] = self._decode(key, value)
        self._rebuild(entries)
        self._committed = copy.copy(self._entries)
        if records:
            self._committed_offset = records[-1][2] + 1

    def wipe(self) -> None:
        self._rebuild({})
        self._committed = {}
        self._committed_offset = None

    def _rebuild(self, entries: dict[bytes, BufferedRecord]) -> None:
        self._entries = {}
        self._heap = []
        self.size_bytes = 0
        self._dirty.clear()
        for key_bytes, record in entries.items():
            self._add(key_bytes, record)


def _encode_headers(headers: tuple[tuple[str, bytes | None], ...]) -> bytes:
    """Their count, then each key (length, UTF-8) and value (length, -1 for None, bytes)."""
    if not headers:
        return b""
    parts = [_LENGTH.pack(len(headers))]
    for name, value in headers:
        encoded = name.encode()
        parts += [_LENGTH.pack(len(encoded)), encoded, _LENGTH.pack(-1 if value is None else len(value)),
                  value or b""]
    return b"".join(parts)


def _decode_headers(data: bytes, offset: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """The headers ``_encode_headers`` wrote at ``offset``, and the offset after them."""
    (count,), offset = _LENGTH.unpack_from(data, offset), offset + _LENGTH.size
    headers = []
    for _ in range(count):
        (length,), offset = _LENGTH.unpack_from(data, offset), offset + _LENGTH.size
        name, offset = data[offset:offset + length].decode(), offset + length
        (length,), offset = _LENGTH.unpack_from(data, offset), offset + _LENGTH.size
        value = None if length < 0 else bytes(data[offset:offset + length])
        headers.append((name, value))
        offset += max(length, 0)
    return tuple(headers), offset


@dataclass
class SuppressionBufferBuilder:
    """Builds the buffer store for a suppress node (the engine calls ``build`` per task)."""

    name: str
    key_serde: Any
    value_serde: Any
    logging_enabled: bool = True
    log_config: dict[str, str] = field(default_factory=dict)

    def build(self) -> TimeOrderedKeyValueBuffer:
        return TimeOrderedKeyValueBuffer(self.name, self.key_serde, self.value_serde, self.logging_enabled)
