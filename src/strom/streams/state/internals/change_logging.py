"""The change-logging layers: every write to a store is also sent to the store's changelog topic.

Timestamped key-value and window stores log the plain value with the stored timestamp as the record
timestamp, as Kafka's ChangeLoggingTimestampedKeyValueBytesStore and ChangeLoggingTimestampedWindowBytesStore
do, so the changelog has Kafka's layout. Window and session changelog keys are the stores' binary keys
(Kafka's WindowKeySchema / SessionKeySchema layouts). Reads pass straight through: each layer binds
the reads of the store below as its own, which skips a call per read.
"""

from __future__ import annotations

from typing import Any

from strom.streams.internals.compiled import Lines, prefixed
from strom.streams.state.context import StateStore, StateStoreContext
from strom.streams.state.internals.layer import (
    KeyValueStoreLayer,
    SessionStoreLayer,
    StoreLayer,
    WindowStoreLayer,
)
from strom.streams.state.internals.timestamps import TIMESTAMP_SIZE, split_timestamped, unpack_timestamp
from strom.streams.state.versioned import PUT_RETURN_CODE_NOT_PUT


class ChangeLoggingKeyValueStore(KeyValueStoreLayer):
    def __init__(self, wrapped: Any, timestamped: bool) -> None:
        super().__init__(wrapped)
        self.timestamped = timestamped
        self._context: StateStoreContext | None = None
        self.get = wrapped.get  # reads pass straight through: skip a call per read

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self._context = context
        self.wrapped.init(context, root)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.wrapped.put(key, value)
        context: Any = self._context
        record_context = context.record_context
        if self.timestamped and value is not None:
            # split_timestamped, one call less per write
            context.log_change(self._name, key, value[TIMESTAMP_SIZE:], unpack_timestamp(value)[0],
                               record_context.headers)
        else:
            context.log_change(self._name, key, value, record_context.timestamp, record_context.headers)

    def delete(self, key: bytes) -> bytes | None:
        old = self.wrapped.get(key)
        self.put(key, None)
        return old

    def fused_get(self) -> Lines | None:
        """The read below, as lines (reads pass straight through), or None."""
        fused_get = getattr(self.wrapped, "fused_get", None)
        return None if fused_get is None else fused_get()

    def fused_put(self) -> Lines | None:
        """``put(kb, wb)`` of a value (not a delete) under record context ``c`` as lines of Python for
        a record cache's flush to inline: the store below's write, then the changelog record, as
        ``put`` sends it. None when a layer below or the context gives no lines (then ``put``)."""
        below = getattr(self.wrapped, "fused_put", None)
        below = None if below is None else below()
        fused_log = getattr(self._context, "fused_log_change", None)
        if below is None or fused_log is None:
            return None
        store_lines, store_names = prefixed(*below, "{p}s_")
        log_lines, log_names = prefixed(*fused_log(self._name), "{p}l_")
        value = ("lv = wb[{p}skip:]", "lt = {p}unpack_timestamp(wb)[0]") if self.timestamped else \
            ("lv = wb", "lt = c[0]")
        names = {**store_names, **log_names,
                 "{p}skip": TIMESTAMP_SIZE, "{p}unpack_timestamp": unpack_timestamp}
        return (*store_lines, *value, "lh = c[4]", *log_lines), names


class _SegmentedChangeLogging:
    """Logging a write of a window or session store by its binary store key."""

    _context: StateStoreContext | None
    name: str

    def _log(self, binary_key: bytes | None, value: bytes | None, timestamped: bool) -> None:
        if binary_key is None:
            return  # the write was dropped as expired: nothing to log
        context = self._context
        assert context is not None, "store used before init"
        record_context = context.record_context
        timestamp = record_context.timestamp
        if timestamped and value is not None:
            timestamp, value = split_timestamped(value)
        context.log_change(self.name, binary_key, value, timestamp, record_context.headers)


class ChangeLoggingWindowStore(_SegmentedChangeLogging, WindowStoreLayer):
    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._context = None
        self.get_binary, self.fetch, self.all = wrapped.get_binary, wrapped.fetch, wrapped.all
        self.fetch_range, self.fetch_key_range = wrapped.fetch_range, wrapped.fetch_key_range

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self._context = context
        self.wrapped.init(context, root)

    def put(self, key: bytes, value: bytes | None, window_start: int) -> bytes | None:
        binary_key = self.wrapped.put(key, value, window_start)
        self._log(binary_key, value, self.wrapped.timestamped)
        return binary_key

    def put_binary(self, binary_key: bytes, value: bytes | None) -> bool:
        """A write by store key (what the caching layer flushes); False when expired and skipped."""
        written = self.wrapped.put_binary(binary_key, value)
        if written:
            self._log(binary_key, value, self.wrapped.timestamped)
        return written


class ChangeLoggingSessionStore(_SegmentedChangeLogging, SessionStoreLayer):
    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._context = None
        self.fetch_session, self.find_sessions = wrapped.fetch_session, wrapped.find_sessions

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self._context = context
        self.wrapped.init(context, root)

    def put(self, key: bytes, start: int, end: int, value: bytes | None) -> bytes | None:
        binary_key = self.wrapped.put(key, start, end, value)
        self._log(binary_key, value, False)
        return binary_key


class ChangeLoggingVersionedKeyValueStore(StoreLayer):
    """Logs each version written: the record's timestamp is the version's, so the changelog alone
    rebuilds the history. A write too old to be kept is not logged."""

    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._context: StateStoreContext | None = None
        self.get = wrapped.get
        self.versions = wrapped.versions

    @property
    def history_retention_ms(self) -> int:
        return self.wrapped.history_retention_ms

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self._context = context
        self.wrapped.init(context, root)

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        valid_to = self.wrapped.put(key, value, timestamp)
        if valid_to != PUT_RETURN_CODE_NOT_PUT:
            context: Any = self._context
            context.log_change(self.name, key, value, timestamp, context.record_context.headers)
        return valid_to
