"""``Stores``: factories for store suppliers and builders, named as in Kafka Streams.

A supplier makes the inner byte store (in-memory or RocksDB); a builder stacks the layers on it, in
Kafka's order: metered (serdes, metrics) -> caching -> change-logging -> transactional buffer -> inner.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from strom.errors import TopologyError
from strom.streams.kstream.windows import Duration, to_millis
from strom.streams.state.internals.caching import CachingKeyValueStore
from strom.streams.state.internals.change_logging import (
    ChangeLoggingKeyValueStore,
    ChangeLoggingVersionedKeyValueStore,
)
from strom.streams.state.internals.lru import LRUEvictingStore
from strom.streams.state.internals.metered import (
    MeteredKeyValueStore,
    MeteredTimestampedKeyValueStore,
    MeteredVersionedKeyValueStore,
)
from strom.streams.state.internals.transaction import TransactionalKeyValueStore, VersionedTransaction
from strom.streams.state.memory import InMemoryKeyValueStore
from strom.streams.state.rocksdb import RocksDBStore
from strom.streams.state.versioned import VersionedKeyValueBytesStore
from strom.streams.state.window import builders as window_builders

__all__ = [
    "InMemoryKeyValueBytesStoreSupplier", "KeyValueBytesStoreSupplier", "KeyValueStoreBuilder",
    "LRUMapBytesStoreSupplier", "RocksDBKeyValueBytesStoreSupplier", "RocksDBVersionedStoreSupplier",
    "Stores", "TimestampedKeyValueStoreBuilder", "VersionedKeyValueStoreBuilder", "validate_store_name",
]

_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def validate_store_name(name: str) -> str:
    """Store names become topic names (changelogs), so they follow Kafka's topic-name rules."""
    if not isinstance(name, str) or not _LEGAL_NAME.fullmatch(name):
        raise TopologyError(f"Invalid store name {name!r}: use 1 to 249 letters, digits, '.', '_' or '-' "
                            "(it becomes part of the changelog topic name).")
    return name


class KeyValueBytesStoreSupplier:
    """Makes a fresh inner byte store per task."""

    metrics_scope = ""
    persistent = False

    def __init__(self, name: str, timestamped: bool = False) -> None:
        self.name = validate_store_name(name)
        self.timestamped = timestamped

    def get(self) -> Any:
        raise NotImplementedError

    def over_logging(self, store: Any) -> Any:
        """The layer this supplier's stores need above change-logging (none but the LRU map's)."""
        return store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class InMemoryKeyValueBytesStoreSupplier(KeyValueBytesStoreSupplier):
    metrics_scope = "in-memory"

    def get(self) -> InMemoryKeyValueStore:
        return InMemoryKeyValueStore(self.name)


class LRUMapBytesStoreSupplier(InMemoryKeyValueBytesStoreSupplier):
    """Kafka's ``Stores.lruMap``: in memory, at most ``max_cache_size`` keys (the least recently used go)."""

    def __init__(self, name: str, max_cache_size: int) -> None:
        if isinstance(max_cache_size, bool) or not isinstance(max_cache_size, int) or max_cache_size <= 0:
            raise TopologyError(f"lru_map {name!r} needs a positive max_cache_size, got {max_cache_size!r}.")
        super().__init__(name)
        self.max_cache_size = max_cache_size

    def over_logging(self, store: Any) -> Any:
        return LRUEvictingStore(store, self.max_cache_size)


class RocksDBKeyValueBytesStoreSupplier(KeyValueBytesStoreSupplier):
    metrics_scope = "rocksdb"
    persistent = True

    def get(self) -> RocksDBStore:
        return RocksDBStore(self.name)


class RocksDBVersionedStoreSupplier(RocksDBKeyValueBytesStoreSupplier):
    """A RocksDB store that keeps each key's versions for ``history_retention_ms`` (KIP-889)."""

    metrics_scope = "rocksdb-versioned"

    def __init__(self, name: str, history_retention_ms: int) -> None:
        super().__init__(name)
        self.history_retention_ms = history_retention_ms

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, history_retention_ms={self.history_retention_ms})"


_DAY_MS = 24 * 60 * 60 * 1000


class KeyValueStoreBuilder:
    """Kafka's StoreBuilder: logging on and caching off unless changed; ``build()`` once per task."""

    timestamped = False
    dsl_default_supplier: Callable[[Any], KeyValueBytesStoreSupplier] | None = None
    """Set for a DSL store that chose no type: makes its supplier for ``default.dsl.store``."""

    def __init__(self, supplier: KeyValueBytesStoreSupplier, key_serde: Any, value_serde: Any) -> None:
        if not isinstance(supplier, KeyValueBytesStoreSupplier):
            raise TopologyError(f"{supplier!r} is not a key-value store supplier; make one with "
                                "Stores.in_memory_key_value_store(name) or "
                                "Stores.persistent_key_value_store(name).")
        self.supplier = supplier
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.caching_enabled = False
        self.logging_enabled = True
        self.log_config: dict[str, str] = {}

    @property
    def name(self) -> str:
        return self.supplier.name

    def with_caching_enabled(self) -> KeyValueStoreBuilder:
        self.caching_enabled = True
        return self

    def with_caching_disabled(self) -> KeyValueStoreBuilder:
        self.caching_enabled = False
        return self

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> KeyValueStoreBuilder:
        """Log to ``<application.id>-<store>-changelog``; ``config`` adds topic configs to the changelog."""
        self.logging_enabled = True
        self.log_config = dict(config or {})
        return self

    def with_logging_disabled(self) -> KeyValueStoreBuilder:
        self.logging_enabled = False
        self.log_config = {}
        return self

    def build(self) -> MeteredKeyValueStore:
        store: Any = TransactionalKeyValueStore(self.supplier.get(), logged=self.logging_enabled,
                                                timestamped=self.timestamped)
        if self.logging_enabled:
            store = ChangeLoggingKeyValueStore(store, timestamped=self.timestamped)
        store = self.supplier.over_logging(store)
        if self.caching_enabled:
            store = CachingKeyValueStore(store)
        metered = MeteredTimestampedKeyValueStore if self.timestamped else MeteredKeyValueStore
        return metered(store, self.key_serde, self.value_serde, self.supplier.metrics_scope)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name!r}, caching={self.caching_enabled}, "
                f"logging={self.logging_enabled})")


class TimestampedKeyValueStoreBuilder(KeyValueStoreBuilder):
    """Values are ValueAndTimestamp; the inner store holds Kafka's timestamp-prefixed layout."""

    timestamped = True


class VersionedKeyValueStoreBuilder(KeyValueStoreBuilder):
    """Builds a versioned store: no cache (as in Kafka Streams); the changelog keeps each version at
    least the history retention plus a day before compaction may drop it (Kafka's default)."""

    def __init__(self, supplier: KeyValueBytesStoreSupplier, key_serde: Any, value_serde: Any) -> None:
        if not isinstance(supplier, RocksDBVersionedStoreSupplier):
            raise TopologyError(f"{supplier!r} is not a versioned store supplier; make one with "
                                "Stores.persistent_versioned_key_value_store(name, history_retention).")
        super().__init__(supplier, key_serde, value_serde)
        self.history_retention_ms = supplier.history_retention_ms
        self.log_config = self._changelog_defaults()

    def _changelog_defaults(self) -> dict[str, str]:
        return {"min.compaction.lag.ms": str(self.history_retention_ms + _DAY_MS)}

    def with_caching_enabled(self) -> KeyValueStoreBuilder:
        raise TopologyError(f"Versioned store {self.name!r} cannot be cached (Kafka Streams' versioned "
                            "stores have no record cache); leave caching off.")

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> KeyValueStoreBuilder:
        super().with_logging_enabled(config)
        self.log_config = {**self._changelog_defaults(), **self.log_config}
        return self

    def build(self) -> MeteredVersionedKeyValueStore:  # type: ignore[override]
        transaction = VersionedTransaction(self.supplier.get(), self.logging_enabled, timestamped=False)
        history = VersionedKeyValueBytesStore(transaction, self.history_retention_ms)
        transaction.replay = history.put  # restoring replays versions through the history, never logs them
        store: Any = ChangeLoggingVersionedKeyValueStore(history) if self.logging_enabled else history
        return MeteredVersionedKeyValueStore(store, self.key_serde, self.value_serde,
                                             self.supplier.metrics_scope)


class Stores:
    """Kafka's ``Stores``: suppliers of inner stores and builders that stack the layers on them."""

    persistent_window_store = staticmethod(window_builders.persistent_window_store)
    persistent_timestamped_window_store = staticmethod(window_builders.persistent_timestamped_window_store)
    in_memory_window_store = staticmethod(window_builders.in_memory_window_store)
    persistent_session_store = staticmethod(window_builders.persistent_session_store)
    in_memory_session_store = staticmethod(window_builders.in_memory_session_store)
    window_store_builder = staticmethod(window_builders.window_store_builder)
    session_store_builder = staticmethod(window_builders.session_store_builder)

    @staticmethod
    def in_memory_key_value_store(name: str) -> InMemoryKeyValueBytesStoreSupplier:
        return InMemoryKeyValueBytesStoreSupplier(name)

    @staticmethod
    def lru_map(name: str, max_cache_size: int) -> LRUMapBytesStoreSupplier:
        """An in-memory store of at most ``max_cache_size`` keys; the least recently used is evicted
        (and deleted in the changelog)."""
        return LRUMapBytesStoreSupplier(name, max_cache_size)

    @staticmethod
    def persistent_key_value_store(name: str) -> RocksDBKeyValueBytesStoreSupplier:
        return RocksDBKeyValueBytesStoreSupplier(name)

    @staticmethod
    def persistent_timestamped_key_value_store(name: str) -> RocksDBKeyValueBytesStoreSupplier:
        return RocksDBKeyValueBytesStoreSupplier(name, timestamped=True)

    @staticmethod
    def persistent_versioned_key_value_store(name: str, history_retention: Duration
                                             ) -> RocksDBVersionedStoreSupplier:
        """A versioned store: ``get(key, as_of_timestamp)`` answers for any time within
        ``history_retention`` of the newest timestamp written; older writes are refused."""
        return RocksDBVersionedStoreSupplier(name, to_millis(history_retention, "history_retention"))

    @staticmethod
    def key_value_store_builder(supplier: KeyValueBytesStoreSupplier, key_serde: Any,
                                value_serde: Any) -> KeyValueStoreBuilder:
        return KeyValueStoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def timestamped_key_value_store_builder(supplier: KeyValueBytesStoreSupplier, key_serde: Any,
                                            value_serde: Any) -> TimestampedKeyValueStoreBuilder:
        return TimestampedKeyValueStoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def versioned_key_value_store_builder(supplier: RocksDBVersionedStoreSupplier, key_serde: Any,
                                          value_serde: Any) -> VersionedKeyValueStoreBuilder:
        return VersionedKeyValueStoreBuilder(supplier, key_serde, value_serde)
