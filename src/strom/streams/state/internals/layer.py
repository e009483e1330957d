"""The one base of every store layer, as Kafka Streams' WrappedStateStore: a layer holds the store below
(``wrapped``), and what it does not change goes straight down. Each kind of store adds the byte-level
calls its layers pass through unchanged; a layer overrides those it changes.

Layers, outermost first: metered (serdes, metrics) -> caching (record cache) -> change-logging
(changelog topic) -> transaction (uncommitted writes) -> the inner store. Window and session stores'
inner segmented stores are their own transaction; versioned stores put their history logic between
change-logging and the transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strom.streams.state.base import BytesStore, KeyValueIterator
from strom.streams.state.context import StateStore, StateStoreContext


class StoreLayer:
    """A layer over another store: its identity and lifecycle (open, flush, close) go straight down."""

    def __init__(self, wrapped: Any) -> None:
        self._name = wrapped.name
        self.wrapped = wrapped

    @property
    def name(self) -> str:
        return self._name

    @property
    def persistent(self) -> bool:
        return self.wrapped.persistent

    @property
    def is_open(self) -> bool:
        return self.wrapped.is_open

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self.wrapped.init(context, root)

    def flush(self) -> None:
        self.wrapped.flush()

    def close(self) -> None:
        self.wrapped.close()


class KeyValueStoreLayer(StoreLayer, BytesStore):
    """A layer of a key-value store over bytes: by default every call goes straight down."""

    def get(self, key: bytes) -> bytes | None:
        return self.wrapped.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.wrapped.put(key, value)

    def _iterate(self, from_key: bytes | None, to_key: bytes | None, reverse: bool) -> KeyValueIterator:
        return self.wrapped._iterate(from_key, to_key, reverse)

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()


class _SegmentedStoreLayer(StoreLayer):
    """What window and session layers read of the segmented store below them."""

    @property
    def observed_stream_time(self) -> int:
        return self.wrapped.observed_stream_time

    @property
    def segment_interval_ms(self) -> int:
        return self.wrapped.segment_interval_ms

    def min_live_time(self) -> int:
        return self.wrapped.min_live_time()


class WindowStoreLayer(_SegmentedStoreLayer):
    """A layer of a window store over bytes (keys and values per window start)."""

    @property
    def timestamped(self) -> bool:
        return self.wrapped.timestamped

    def put(self, key: bytes, value: bytes | None, window_start: int) -> bytes | None:
        """Returns the store key written (None: dropped as expired)."""
        return self.wrapped.put(key, value, window_start)

    def put_binary(self, binary_key: bytes, value: bytes | None) -> bool:
        return self.wrapped.put_binary(binary_key, value)

    def get_binary(self, binary_key: bytes) -> bytes | None:
        return self.wrapped.get_binary(binary_key)

    def fetch(self, key: bytes, window_start: int) -> bytes | None:
        return self.wrapped.fetch(key, window_start)

    def fetch_range(self, key: bytes, time_from: int, time_to: int,
                    reverse: bool = False) -> Iterator[tuple[int, bytes]]:
        return self.wrapped.fetch_range(key, time_from, time_to, reverse)

    def fetch_key_range(self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int,
                        reverse: bool = False) -> Iterator[tuple[bytes, int, bytes]]:
        return self.wrapped.fetch_key_range(key_from, key_to, time_from, time_to, reverse)

    def all(self, reverse: bool = False) -> Iterator[tuple[bytes, int, bytes]]:
        return self.wrapped.all(reverse)


class SessionStoreLayer(_SegmentedStoreLayer):
    """A layer of a session store over bytes (one value per key and session)."""

    def put(self, key: bytes, start: int, end: int, value: bytes | None) -> bytes | None:
        """Returns the store key written (None: dropped as expired)."""
        return self.wrapped.put(key, start, end, value)

    def fetch_session(self, key: bytes, start: int, end: int) -> bytes | None:
        return self.wrapped.fetch_session(key, start, end)

    def find_sessions(self, key_from: bytes | None, key_to: bytes | None, earliest_session_end: int,
                      latest_session_start: int,
                      reverse: bool = False) -> Iterator[tuple[bytes, int, int, bytes]]:
        return self.wrapped.find_sessions(key_from, key_to, earliest_session_end, latest_session_start,
                                          reverse)
