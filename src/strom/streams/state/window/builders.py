"""Suppliers and builders of window and session stores (Kafka's ``Stores`` window/session factories).

A builder stacks the layers exactly as Kafka Streams: metered -> caching -> change-logging -> inner.
Caching is off unless the builder enables it (the DSL does, unless Materialized disables it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.errors import WindowSpecError
from strom.kafka.serdes import Serde
from strom.streams.kstream.windows import Duration, to_millis
from strom.streams.state.internals.caching import CachingSessionStore, CachingWindowStore
from strom.streams.state.internals.change_logging import ChangeLoggingSessionStore, ChangeLoggingWindowStore
from strom.streams.state.internals.metered import (
    MeteredSessionStore,
    MeteredTimestampedWindowStore,
    MeteredWindowStore,
)
from strom.streams.state.window.bytes_stores import SessionBytesStore, WindowBytesStore


@dataclass(frozen=True)
class WindowBytesStoreSupplier:
    name: str
    retention_ms: int
    window_size_ms: int
    retain_duplicates: bool
    persistent: bool
    timestamped: bool
    segment_interval_ms: int | None = None

    def get(self) -> WindowBytesStore:
        store = WindowBytesStore(self.name, self.retention_ms, self.window_size_ms, self.retain_duplicates,
                                 self.persistent, self.segment_interval_ms)
        store.timestamped = self.timestamped
        return store


@dataclass(frozen=True)
class SessionBytesStoreSupplier:
    name: str
    retention_ms: int
    persistent: bool
    segment_interval_ms: int | None = None

    def get(self) -> SessionBytesStore:
        return SessionBytesStore(self.name, self.retention_ms, self.persistent, self.segment_interval_ms)


def _window_supplier(name: str, retention: Duration, window_size: Duration, retain_duplicates: bool,
                     persistent: bool, timestamped: bool) -> WindowBytesStoreSupplier:
    retention_ms = to_millis(retention, "Window store retention")
    size_ms = to_millis(window_size, "Window store window size")
    if size_ms > retention_ms:
        raise WindowSpecError(f"Window store {name!r}: the window size ({size_ms} ms) must not exceed the "
                              f"retention ({retention_ms} ms). Increase the retention.")
    return WindowBytesStoreSupplier(name, retention_ms, size_ms, retain_duplicates, persistent, timestamped)


def persistent_window_store(name: str, retention: Duration, window_size: Duration,
                            retain_duplicates: bool = False) -> WindowBytesStoreSupplier:
    return _window_supplier(name, retention, window_size, retain_duplicates, True, False)


def persistent_timestamped_window_store(name: str, retention: Duration, window_size: Duration,
                                        retain_duplicates: bool = False) -> WindowBytesStoreSupplier:
    return _window_supplier(name, retention, window_size, retain_duplicates, True, True)


def in_memory_window_store(name: str, retention: Duration, window_size: Duration,
                           retain_duplicates: bool = False) -> WindowBytesStoreSupplier:
    return _window_supplier(name, retention, window_size, retain_duplicates, False, False)


def in_memory_timestamped_window_store(name: str, retention: Duration, window_size: Duration,
                                       retain_duplicates: bool = False) -> WindowBytesStoreSupplier:
    return _window_supplier(name, retention, window_size, retain_duplicates, False, True)


def persistent_session_store(name: str, retention: Duration) -> SessionBytesStoreSupplier:
    return SessionBytesStoreSupplier(name, to_millis(retention, "Session store retention"), True)


def in_memory_session_store(name: str, retention: Duration) -> SessionBytesStoreSupplier:
    return SessionBytesStoreSupplier(name, to_millis(retention, "Session store retention"), False)


CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000
"""Kafka's ``windowstore.changelog.additional.retention.ms`` default: one day beyond the store's."""


class _Builder:
    dsl_default_supplier: Callable[[Any], Any] | None = None
    """Set for a DSL store that chose no type: makes its supplier for ``default.dsl.store``."""

    def __init__(self, supplier: Any, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> None:
        self.supplier = supplier
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.logging_enabled = True
        self._log_overrides: dict[str, str] = {}

    def changelog_config(self, additional_retention_ms: int = CHANGELOG_ADDITIONAL_RETENTION_MS
                         ) -> dict[str, str]:
        """Windowed changelogs are compacted *and* deleted by time, as Kafka Streams creates them: keys of
        expired windows are never written again, so compaction alone would keep them forever. Retention
        is the store's plus ``windowstore.changelog.additional.retention.ms``; the store's own
        ``with_logging_enabled`` configs override both."""
        if not self.logging_enabled:
            return {}
        retention = min(self.supplier.retention_ms + additional_retention_ms, 2**63 - 1)  # unlimited windows
        return {"cleanup.policy": "compact,delete", "retention.ms": str(retention), **self._log_overrides}

    @property
    def log_config(self) -> dict[str, str]:
        return self.changelog_config()

    @property
    def name(self) -> str:
        return self.supplier.name

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> _Builder:
        """Log to the changelog topic; ``config`` adds to (or overrides) its topic configs."""
        self.logging_enabled = True
        self._log_overrides = dict(config or {})
        return self

    def with_logging_disabled(self) -> _Builder:
        self.logging_enabled = False
        self._log_overrides = {}
        return self


class WindowStoreBuilder(_Builder):
    """Builds a (timestamped) window store; caching is off until ``with_caching_enabled``."""

    def __init__(self, supplier: WindowBytesStoreSupplier, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None) -> None:
        super().__init__(supplier, key_serde, value_serde)
        self.caching_enabled = False

    def with_caching_enabled(self) -> WindowStoreBuilder:
        if self.supplier.retain_duplicates:
            raise WindowSpecError(f"Window store {self.name!r} retains duplicates and cannot be cached. "
                                  "Leave caching disabled for it.")
        self.caching_enabled = True
        return self

    def with_caching_disabled(self) -> WindowStoreBuilder:
        self.caching_enabled = False
        return self

    def build(self) -> MeteredWindowStore:
        inner = self.supplier.get()
        inner.logged = self.logging_enabled
        store: Any = ChangeLoggingWindowStore(inner) if self.logging_enabled else inner
        if self.caching_enabled:
            store = CachingWindowStore(store)
        metered = MeteredTimestampedWindowStore if self.supplier.timestamped else MeteredWindowStore
        return metered(store, self.key_serde, self.value_serde, self.supplier.window_size_ms)


class SessionStoreBuilder(_Builder):
    """Builds a session store; caching is off until ``with_caching_enabled``."""

    def __init__(self, supplier: SessionBytesStoreSupplier, key_serde: Serde[Any] | None,
                 value_serde: Serde[Any] | None) -> None:
        super().__init__(supplier, key_serde, value_serde)
        self.caching_enabled = False

    def with_caching_enabled(self) -> SessionStoreBuilder:
        self.caching_enabled = True
        return self

    def with_caching_disabled(self) -> SessionStoreBuilder:
        self.caching_enabled = False
        return self

    def build(self) -> MeteredSessionStore:
        inner = self.supplier.get()
        inner.logged = self.logging_enabled
        store: Any = ChangeLoggingSessionStore(inner) if self.logging_enabled else inner
        if self.caching_enabled:
            store = CachingSessionStore(store)
        return MeteredSessionStore(store, self.key_serde, self.value_serde)


def window_store_builder(supplier: WindowBytesStoreSupplier, key_serde: Serde[Any] | None = None,
                         value_serde: Serde[Any] | None = None) -> WindowStoreBuilder:
    return WindowStoreBuilder(supplier, key_serde, value_serde)


def session_store_builder(supplier: SessionBytesStoreSupplier, key_serde: Serde[Any] | None = None,
                          value_serde: Serde[Any] | None = None) -> SessionStoreBuilder:
    return SessionStoreBuilder(supplier, key_serde, value_serde)
