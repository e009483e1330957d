"""The stream side's buffer of a stream-table join with a grace period (KIP-923).

Every stream record waits here until the observed stream time (the largest timestamp the join has
seen) passes its timestamp plus the grace period: a table update that arrives late, but within the
grace period, is then in the versioned table before the record joins. Records leave in (timestamp, key
bytes, arrival) order, the order of Kafka Streams' buffer (its time-first key schema).

Underneath is a logged RocksDB key-value store of bytes, so buffered records are committed, restored
and aborted with the task's other state:

- ``r | ts | key | seq`` -> the record (key, value, headers), ``seq`` keeping records of one timestamp
  and key in arrival order;
- ``s`` -> the next ``seq``; ``t`` -> the observed stream time.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from strom.kafka.serdes import Serdes
from strom.streams.state.internals.timestamps import (
    MIN_TIMESTAMP,
    from_sortable,
    pack_timestamp,
    sortable,
    unpack_timestamp,
)
from strom.streams.state.stores import KeyValueStoreBuilder, Stores

__all__ = ["BufferedRecord", "Headers", "TimeOrderedRecordBuffer", "record_buffer_builder"]

_SEQUENCE = struct.Struct(">Q")
_LENGTH = struct.Struct(">i")
_SEQ_KEY, _STREAM_TIME_KEY = b"s", b"t"

Headers = Sequence[tuple[str, bytes | None]]
BufferedRecord = tuple[int, bytes | None, bytes | None, Headers]
"""(timestamp, key bytes, value bytes, headers) of a buffered record."""


def record_buffer_builder(name: str) -> KeyValueStoreBuilder:
    """The buffer's store: RocksDB, logged, uncached (each record is written once and read once)."""
    supplier = Stores.persistent_key_value_store(name)
    return Stores.key_value_store_builder(supplier, Serdes.ByteArray(), Serdes.ByteArray())


class TimeOrderedRecordBuffer:
    """Stream records waiting for the observed stream time to pass their timestamp plus the grace period."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def observe(self, timestamp: int) -> int:
        """Advances the observed stream time to ``timestamp`` if later; returns it."""
        raw = self.store.get(_STREAM_TIME_KEY)
        stream_time = MIN_TIMESTAMP if raw is None else unpack_timestamp(raw)[0]
        if timestamp > stream_time:
            self.store.put(_STREAM_TIME_KEY, pack_timestamp(timestamp))
            return timestamp
        return stream_time

    def put(self, timestamp: int, key: bytes | None, value: bytes | None, headers: Headers) -> None:
        raw_seq = self.store.get(_SEQ_KEY)
        seq = 0 if raw_seq is None else _SEQUENCE.unpack(raw_seq)[0]
        self.store.put(_SEQ_KEY, _SEQUENCE.pack(seq + 1))
        self.store.put(b"r" + sortable(timestamp) + (key or b"") + _SEQUENCE.pack(seq),
                       _encode(key, value, headers))

    def evict_until(self, horizon: int) -> list[BufferedRecord]:
        """Removes and returns the records with a timestamp at or before ``horizon``, oldest first."""
        due = list(self.store.range(b"r", b"r" + sortable(horizon + 1)))  # below every record at horizon + 1
        for entry_key, _ in due:
            self.store.delete(entry_key)
        return [(from_sortable(entry_key, 1), *_decode(raw)) for entry_key, raw in due]


def _encode(key: bytes | None, value: bytes | None, headers: Headers) -> bytes:
    parts = [_field(key), _field(value), _LENGTH.pack(len(headers))]
    for name, header_value in headers:
        parts += [_field(name.encode()), _field(header_value)]
    return b"".join(parts)


def _field(data: bytes | None) -> bytes:
    return _LENGTH.pack(-1) if data is None else _LENGTH.pack(len(data)) + data


def _decode(raw: bytes) -> tuple[bytes | None, bytes | None, Headers]:
    position = 0

    def field() -> bytes | None:
        nonlocal position
        length = _LENGTH.unpack_from(raw, position)[0]
        position += 4
        if length < 0:
            return None
        position += length
        return raw[position - length:position]

    key, value = field(), field()
    count = _LENGTH.unpack_from(raw, position)[0]
    position += 4
    headers = []
    for _ in range(count):
        name = field()
        headers.append(((name or b"").decode(), field()))
    return key, value, headers
