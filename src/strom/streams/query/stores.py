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

from strom.errors import ConfigError, InvalidStateStoreError
from strom.streams.state.internals.metered import (
    MeteredKeyValueStore,
    MeteredSessionStore,
    MeteredTimestampedKeyValueStore,
    MeteredVersionedKeyValueStore,
    MeteredWindowStore,
)
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.versioned import VersionedRecord
from strom.streams.state.window.reads import WindowFetches

__all__ = [
    "QueryableStoreType",
    "QueryableStoreTypes",
    "ReadOnlyKeyValueStore",
    "ReadOnlySessionStore",
    "ReadOnlyVersionedKeyValueStore",
    "ReadOnlyWindowStore",
    "StoreQueryParameters",
]


def _unchanged(value: Any) -> Any:
    return value


def _plain(value: ValueAndTimestamp[Any] | None) -> Any:
    return None if value is None else value.value


class _PartitionedView:
    """A read-only view over the partitions of one store; ``value`` makes a stored value the one
    returned (a timestamped store's ValueAndTimestamp becomes its plain value for a plain type)."""

    def __init__(self, name: str, stores: Sequence[Any], value: Callable[[Any], Any] = _unchanged) -> None:
        self.name = name
        self._stores = list(stores)
        self._value = value

    def _open_stores(self) -> list[Any]:
        if not all(store.is_open for store in self._stores):
            raise InvalidStateStoreError(f"The view of store {self.name!r} is closed (its application "
                                         "was stopped or closed); query the store again for a new view.")
        return self._stores

    def _first(self, lookup: Callable[[Any], Any]) -> Any:
        """The first partition's answer that is not None: a key lives in one partition."""
        for store in self._open_stores():
            found = lookup(store)
            if found is not None:
                return self._value(found)
        return None

    def _entries(self, scan: Callable[[Any], Iterator[tuple[Any, Any]]]) -> Iterator[tuple[Any, Any]]:
        value = self._value
        scans = map(scan, self._open_stores())
        return ((first, value(found)) for first, found in chain.from_iterable(scans))


class ReadOnlyKeyValueStore(_PartitionedView):
    """Kafka's ReadOnlyKeyValueStore over the partitions of one key-value store."""

    def get(self, key: Any) -> Any:
        """The key's value, None when no partition has it."""
        return self._first(lambda store: store.get(key))

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        """Entries with from_key <= key <= to_key (None: unbounded), in key order per partition."""
        return self._entries(lambda store: store.range(from_key, to_key))

    def reverse_range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return self._entries(lambda store: store.reverse_range(from_key, to_key))

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._entries(lambda store: store.all())

    def reverse_all(self) -> Iterator[tuple[Any, Any]]:
        return self._entries(lambda store: store.reverse_all())

    def prefix_scan(self, prefix: Any, prefix_key_serializer: Any) -> Iterator[tuple[Any, Any]]:
        return self._entries(lambda store: store.prefix_scan(prefix, prefix_key_serializer))

    def approximate_num_entries(self) -> int:
        return sum(store.approximate_num_entries() for store in self._open_stores())


class ReadOnlyWindowStore(WindowFetches, _PartitionedView):
    """Kafka's ReadOnlyWindowStore over the partitions of one window store (``fetch`` and
    ``backward_fetch`` take Kafka's argument lists: state/window/reads.py)."""

    def fetch(self, key: Any, window_start: int, *more: Any) -> Any:
        """The key's value in the window starting at ``window_start``, None when there is none."""
        if more:
            return self.fetch_more(key, window_start, more)
        return self._first(lambda store: store.fetch(key, window_start))

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """(window start, value) of the key's windows starting in [time_from, time_to], oldest first."""
        return self._entries(lambda store: store.fetch_range(key, time_from, time_to))

    def backward_fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        return self._entries(lambda store: store.backward_fetch_range(key, time_from, time_to))

    def fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                        time_to: int) -> Iterator[tuple[Any, Any]]:
        """(Windowed key, value) for keys in [key_from, key_to] (None: unbounded)."""
        return self._entries(lambda store: store.fetch_key_range(key_from, key_to, time_from, time_to))

    def backward_fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                                 time_to: int) -> Iterator[tuple[Any, Any]]:
        return self._entries(
            lambda store: store.backward_fetch_key_range(key_from, key_to, time_from, time_to))

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Any, Any]]:
        return self._entries(lambda store: store.fetch_all(time_from, time_to))

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self._entries(lambda store: store.all())


class ReadOnlySessionStore(_PartitionedView):
    """Kafka's ReadOnlySessionStore over the partitions of one session store."""

    def fetch(self, key: Any) -> Iterator[tuple[Any, Any]]:
        """(Windowed key, aggregate) of every session of ``key``."""
        return self._entries(lambda store: store.fetch(key))

    def find_sessions(self, key: Any, earliest_session_end: int,
                      latest_session_start: int) -> Iterator[tuple[Any, Any]]:
        """Sessions of ``key`` ending at or after ``earliest_session_end`` and starting at or before
        ``latest_session_start``."""
        return self._entries(
            lambda store: store.find_sessions(key, earliest_session_end, latest_session_start))

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        return self._first(lambda store: store.fetch_session(key, session_start, session_end))


class ReadOnlyVersionedKeyValueStore(_PartitionedView):
    """A versioned store's reads over its partitions (what Kafka offers as IQv2's VersionedKeyQuery)."""

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord | None:
        """The key's latest version, or the one valid at ``as_of_timestamp``; None when there is none."""
        return self._first(lambda store: store.get(key, as_of_timestamp))


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
    def versioned_key_value_store() -> QueryableStoreType:
        return QueryableStoreType("versioned_key_value_store",
                                  lambda s: isinstance(s, MeteredVersionedKeyValueStore),
                                  ReadOnlyVersionedKeyValueStore)

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
