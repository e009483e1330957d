"""Versioned key-value stores (KIP-889): every key keeps its values over time, so a reader can ask for the
value a key had as of a timestamp. Stream-table joins use it to join a stream record with the table as it
was at the record's time, not as it is when the record happens to be processed (KIP-914).

Layers, as the other stores (``strom.streams.state.internals``): metered (serdes) -> change-logging (one
changelog record per version, with the version's timestamp) -> the history logic here -> transactional
buffer -> inner RocksDB store. Versioned stores have no cache, as in Kafka Streams.

The history lives in the inner store's ordered key space:

- ``v | len(key) | key | ts`` -> ``valid_to | 1 | value`` or ``valid_to | 0`` (a tombstone): one entry per
  version, valid from its own timestamp to the next version's (``valid_to``), so ``get(key, as_of)`` is
  one reverse seek.
- ``x | valid_to | len(key) | key | ts`` -> empty: an index by end of validity. A version whose validity
  ended more than the history retention before the observed stream time can answer no valid query; the
  index finds those with one range scan, as Kafka drops whole segments. A latest tombstone is indexed by
  its own timestamp: once that is out of the history, a deleted key leaves nothing behind.
- ``t`` -> the observed stream time (the largest timestamp written), kept with the data so a restarted
  task knows which writes are too old.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from strom.errors import VersionedTimestampError
from strom.streams.state.internals.layer import StoreLayer
from strom.streams.state.internals.timestamps import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    TIMESTAMP_SIZE,
    from_sortable,
    pack_timestamp,
    sortable,
    unpack_timestamp,
    with_timestamp,
)

__all__ = [
    "PUT_RETURN_CODE_NOT_PUT", "PUT_RETURN_CODE_VALID_TO_UNDEFINED", "VersionedKeyValueBytesStore",
    "VersionedRecord", "check_timestamp",
]

PUT_RETURN_CODE_VALID_TO_UNDEFINED = -1
"""``put`` wrote the key's latest version (valid until a later one comes)."""
PUT_RETURN_CODE_NOT_PUT = -(2**63)
"""``put`` wrote nothing: the timestamp is older than the observed stream time minus the history retention."""

_LENGTH = struct.Struct(">I")
_STREAM_TIME_KEY = b"t"
_VALUE, _TOMBSTONE = b"\x01", b"\x00"


class VersionedRecord(NamedTuple):
    """A value with the timestamp it became valid and, unless it is the latest, when it stopped being."""

    value: Any
    timestamp: int
    valid_to: int | None = None


def _version(valid_to: int | None, value: bytes | None) -> bytes:
    """A stored version: when it stops being valid (the largest timestamp: not yet), then the value."""
    return pack_timestamp(MAX_TIMESTAMP if valid_to is None else valid_to) + (
        _TOMBSTONE if value is None else _VALUE + value)


def _is_latest_tombstone(version: bytes) -> bool:
    return version[8:9] == _TOMBSTONE and unpack_timestamp(version)[0] == MAX_TIMESTAMP


def _valid_to(version: bytes) -> int | None:
    valid_to = unpack_timestamp(version)[0]
    return None if valid_to == MAX_TIMESTAMP else valid_to


def _prefix(key: bytes) -> bytes:
    """A version key's prefix: the length keeps ``ab`` from sharing a range with ``abc``."""
    return b"v" + _LENGTH.pack(len(key)) + key


def _index_key(valid_to: int, key: bytes, timestamp: int) -> bytes:
    return b"x" + sortable(valid_to) + _LENGTH.pack(len(key)) + key + sortable(timestamp)


class VersionedKeyValueBytesStore(StoreLayer):
    """The history logic over a byte store (the task's transactional buffer over RocksDB)."""

    def __init__(self, wrapped: Any, history_retention_ms: int) -> None:
        super().__init__(wrapped)
        self.history_retention_ms = history_retention_ms

    def observed_stream_time(self) -> int:
        raw = self.wrapped.get(_STREAM_TIME_KEY)
        return MIN_TIMESTAMP if raw is None else unpack_timestamp(raw)[0]

    def _oldest_valid_query(self, stream_time: int) -> int:
        return MIN_TIMESTAMP if stream_time == MIN_TIMESTAMP else stream_time - self.history_retention_ms

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        """Writes the version of ``key`` at ``timestamp`` (None: a tombstone); returns when it stops being
        valid (the next version's timestamp), ``PUT_RETURN_CODE_VALID_TO_UNDEFINED`` if it is the latest,
        or ``PUT_RETURN_CODE_NOT_PUT`` if it is older than the history keeps."""
        stream_time = self.observed_stream_time()
        if timestamp < self._oldest_valid_query(stream_time):
            return PUT_RETURN_CODE_NOT_PUT
        prefix = _prefix(key)
        previous = self._version_at(prefix, timestamp)
        following = _valid_to(previous[1]) if previous is not None else self._first_after(prefix, timestamp)
        put = self.wrapped.put
        put(prefix + sortable(timestamp), _version(following, value))
        if previous is not None and _is_latest_tombstone(previous[1]):
            put(_index_key(previous[0], key, previous[0]), None)  # it is no longer the latest (or replaced)
        if previous is None or previous[0] < timestamp:  # a new version, not a replaced one
            if previous is not None:  # the previous version now ends here, not at the following one
                previous_time, previous_raw = previous
                put(prefix + sortable(previous_time),
                    with_timestamp(timestamp, previous_raw[TIMESTAMP_SIZE:]))
                if following is not None:
                    put(_index_key(following, key, previous_time), None)
                put(_index_key(timestamp, key, previous_time), b"")
            if following is not None:
                put(_index_key(following, key, timestamp), b"")
        if value is None and following is None:  # a latest tombstone expires by its own timestamp
            put(_index_key(timestamp, key, timestamp), b"")
        if timestamp > stream_time:
            put(_STREAM_TIME_KEY, pack_timestamp(timestamp))
            self._expire(self._oldest_valid_query(timestamp))
        return PUT_RETURN_CODE_VALID_TO_UNDEFINED if following is None else following

    def get(self, key: bytes, as_of: int = MAX_TIMESTAMP) -> tuple[bytes, int, int | None] | None:
        """(value, valid from, valid to) of the version valid at ``as_of``; None for no value (never written,
        deleted, or ``as_of`` older than the history keeps, unless the latest version is valid then: as in
        Kafka Streams, the latest version never expires)."""
        found = self._version_at(_prefix(key), as_of)
        if found is not None and as_of < self._oldest_valid_query(self.observed_stream_time()):
            found = found if _valid_to(found[1]) is None else None
        if found is None or found[1][8:9] != _VALUE:
            return None
        timestamp, raw = found
        return raw[9:], timestamp, _valid_to(raw)

    def versions(self, key: bytes, time_from: int = MIN_TIMESTAMP,
                 time_to: int = MAX_TIMESTAMP) -> list[tuple[bytes, int, int | None]]:
        """(value, valid from, valid to) of every version valid at some time in [time_from, time_to],
        the latest first. A deletion is no version: the versions before it are in the answer. As for
        ``get``, a ``time_to`` older than the history keeps leaves only the latest version to answer."""
        prefix = _prefix(key)
        only_latest = time_to < self._oldest_valid_query(self.observed_stream_time())
        found = []
        for raw_key, raw in self.wrapped.reverse_range(prefix, prefix + sortable(time_to)):
            valid_to = _valid_to(raw)
            if (valid_to is not None and valid_to <= time_from) or (only_latest and valid_to is not None):
                break
            if raw[8:9] == _VALUE:
                found.append((raw[9:], from_sortable(raw_key, len(prefix)), valid_to))
            if only_latest:
                break
        return found

    def _version_at(self, prefix: bytes, timestamp: int) -> tuple[int, bytes] | None:
        """(valid from, stored version) of the version valid at ``timestamp``: one reverse seek."""
        for raw_key, raw in self.wrapped.reverse_range(prefix, prefix + sortable(timestamp)):
            return from_sortable(raw_key, len(prefix)), raw
        return None

    def _first_after(self, prefix: bytes, timestamp: int) -> int | None:
        """When the key's first version after ``timestamp`` starts (only asked when none is at or before)."""
        if timestamp == MAX_TIMESTAMP:
            return None
        last = prefix + sortable(MAX_TIMESTAMP)
        for raw_key, _ in self.wrapped.range(prefix + sortable(timestamp + 1), last):
            return from_sortable(raw_key, len(prefix))
        return None

    def _expire(self, oldest_valid_query: int) -> None:
        """Drops the versions that stopped being valid at or before the oldest timestamp a query may ask
        for: no valid query can return them."""
        expired = [index for index, _ in self.wrapped.range(b"x", b"x" + sortable(oldest_valid_query + 1))]
        put = self.wrapped.put
        for index in expired:
            put(b"v" + index[9:], None)  # the version: the index key without tag and valid_to
            put(index, None)


def check_timestamp(timestamp: Any, store: str) -> int:
    """``timestamp`` if it is whole milliseconds; else a VersionedTimestampError naming ``store``."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise VersionedTimestampError(f"Versioned store {store} needs timestamps as whole milliseconds "
                                      f"(int), got {timestamp!r}.")
    return timestamp
