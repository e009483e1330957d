"""Interactive queries: which store to read and as what (Kafka's ``StoreQueryParameters`` and
``QueryableStoreTypes``), and the read-only views a runtime hands out.

A store of a sub-topology exists once per stream task, one per partition. A view reads all of
them (or the one ``with_partition`` names), as Kafka's composite stores do: a key is looked up
in each partition's store; ranges and scans go partition by partition, each in key order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from typing import Any

from strom.errors import ConfigError
from strom.streams.state.metered import MeteredKeyValueStore, MeteredTimestampedKeyValueStore
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.window.metered import MeteredSessionStore, MeteredWindowStore


def _unchanged(value: Any) -> Any:
    return value


def _plain(value: ValueAndTimestamp[Any] | None) -> Any:
    return None if value is None else value.value


class ReadOnlyKeyValueStore:
    """Kafka's ReadOnlyKeyValueStore over the partitions of one key-value store."""

    def __init__(self, name: str, stores: Sequence[MeteredKeyValueStore],
                 value: Callable[[Any], Any] = _unchanged) -> None:
        self.name = name
        self._stores = list(stores)
        self._value = value

    def get(self, key: Any) -> Any:
        """The key's value, None when no partition has it."""
        for store in self._stores:
            found = store.get(key)
            if found is not None:
                return self._value(found)
        return None

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        """Entries with from_key <= key <= to_key (None: unbounded), in key order per partition."""
        return self._entries(store.range(from_key, to_key) for store in self._stores)

    def reverse_range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return self._entries(store.reverse_range(from_key, to_key) for store in self._stores)

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._entries(store.all() for store in self._stores)

    def reverse_all(self) -> Iterator[tuple[Any, Any]]:
        return self._entries(store.reverse_all() for store in self._stores)

    def prefix_scan(self, prefix: Any, prefix_key_serializer: Any) -> Iterator[tuple[Any, Any]]:
        return self._entries(store.prefix_scan(prefix, prefix_key_serializer) for store in self._stores)

    def approximate_num_entries(self) -> int:
        return sum(store.approximate_num_entries() for store in self._stores)

    def _entries(self, scans: Iterator[Iterator[tuple[Any, Any]]]) -> Iterator[tuple[Any, Any]]:
        value = self._value
        return ((key, value(found)) for key, found in chain.from_iterable(scans))


class ReadOnlyWindowStore:
    """Kafka's ReadOnlyWindowStore over the partitions of one window store."""

    def __init__(self, name: str, stores: Sequence[MeteredWindowStore],
                 value: Callable[[Any], Any] = _unchanged) -> None:
        self.name = name
        self._stores = list(stores)
        self._value = value

    def fetch(self, key: Any, window_start: int) -> Any:
        """The key's value in the window starting at ``window_start``, None when there is none."""
        for store in self._stores:
            found = store.fetch(key, window_start)
            if found is not None:
                return self._value(found)
        return None

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """(window start, value) of the key's windows starting in [time_from, time_to], oldest first."""
        return self._entries(s.fetch_range(key, time_from, time_to) for s in self._stores)

    def backward_fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        return self._entries(s.backward_fetch_range(key, time_from, time_to) for s in self._stores)

    def fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                        time_to: int) -> Iterator[tuple[Any, Any]]:
        """(Windowed key, value) for keys in [key_from, key_to] (None: unbounded)."""
        return self._entries(s.fetch_key_range(key_from, key_to, time_from, time_to) for s in self._stores)

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Any, Any]]:
        return self._entries(s.fetch_all(time_from, time_to) for s in self._stores)

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._entries(s.all() for s in self._stores)

    def _entries(self, scans: Iterator[Iterator[tuple[Any, Any]]]) -> Iterator[tuple[Any, Any]]:
        value = self._value
        return ((first, value(found)) for first, found in chain.from_iterable(scans))


class ReadOnlySessionStore:
    """Kafka's ReadOnlySessionStore over the partitions of one session store."""

    def __init__(self, name: str, stores: Sequence[MeteredSessionStore]) -> None:
        self.name = name
        self._stores = list(stores)

    def fetch(self, key: Any) -> Iterator[tuple[Any, Any]]:
        """(Windowed key, aggregate) of every session of ``key``."""
        return chain.from_iterable(s.fetch(key) for s in self._stores)

    def find_sessions(self, key: Any, earliest_session_end: int,
                      latest_session_start: int) -> Iterator[tuple[Any, Any]]:
        """Sessions of ``key`` ending at or after ``earliest_session_end`` and starting at or before
        ``latest_session_start``."""
        return chain.from_iterable(s.find_sessions(key, earliest_session_end, latest_session_start)
                                   for s in self._stores)

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        for store in self._stores:
            found = store.fetch_session(key, session_start, session_end)
            if found is not None:
                return found
        return None


@dataclass(frozen=True)
class QueryableStoreType:
    """What a store must be to be read as this type, and the read-only view it is read through."""

    name: str
    accepts: Callable[[Any], bool]
    view: Callable[[str, Sequence[Any]], Any]


def _timestamped_window(store: Any) -> bool:
    return isinstance(store, MeteredWindowStore) and store.timestamped


def _key_value_view(name: str, stores: Sequence[Any]) -> ReadOnlyKeyValueStore:
    timestamped = any(isinstance(s, MeteredTimestampedKeyValueStore) for s in stores)
    return ReadOnlyKeyValueStore(name, stores, _plain if timestamped else _unchanged)


def _window_view(name: str, stores: Sequence[Any]) -> ReadOnlyWindowStore:
    return ReadOnlyWindowStore(name, stores, _plain if any(map(_timestamped_window, stores)) else _unchanged)


class QueryableStoreTypes:
    """Kafka's QueryableStoreTypes. A plain type also reads a timestamped store (values without
    their timestamps); a timestamped type reads only a timestamped store."""

    @staticmethod
    def key_value_store() -> QueryableStoreType:
        return QueryableStoreType("key_value_store", lambda s: isinstance(s, MeteredKeyValueStore),
                                  _key_value_view)

    @staticmethod
    def timestamped_key_value_store() -> QueryableStoreType:
        return QueryableStoreType("timestamped_key_value_store",
                                  lambda s: isinstance(s, MeteredTimestampedKeyValueStore),
                                  ReadOnlyKeyValueStore)

    @staticmethod
    def window_store() -> QueryableStoreType:
        return QueryableStoreType("window_store", lambda s: isinstance(s, MeteredWindowStore), _window_view)

    @staticmethod
    def timestamped_window_store() -> QueryableStoreType:
        return QueryableStoreType("timestamped_window_store", _timestamped_window, ReadOnlyWindowStore)

    @staticmethod
    def session_store() -> QueryableStoreType:
        return QueryableStoreType("session_store", lambda s: isinstance(s, MeteredSessionStore),
                                  ReadOnlySessionStore)


@dataclass(frozen=True)
class StoreQueryParameters:
    """Which store to query and how: ``StoreQueryParameters.from_name("counts",
    QueryableStoreTypes.key_value_store())``, optionally ``.with_partition(p)`` (one task's store
    only) and ``.enable_stale_stores()`` (read the copy as it is, without catching up first)."""

    store_name: str
    query_type: QueryableStoreType
    partition: int | None = None
    stale_stores: bool = False

    @classmethod
    def from_name(cls, store_name: str, query_type: QueryableStoreType) -> StoreQueryParameters:
        if not isinstance(query_type, QueryableStoreType):
            raise ConfigError(f"{query_type!r} is not a queryable store type; pass one of "
                              "QueryableStoreTypes.key_value_store(), .window_store() and so on.")
        return cls(store_name, query_type)

    def with_partition(self, partition: int) -> StoreQueryParameters:
        if not isinstance(partition, int) or partition < 0:
            raise ConfigError(f"Invalid partition {partition!r}: expected a partition number >= 0.")
        return replace(self, partition=partition)

    def enable_stale_stores(self) -> StoreQueryParameters:
        return replace(self, stale_stores=True)
