"""Change-logging layers of window and session stores: each write also goes to the changelog.

Changelog keys are the stores' binary keys (Kafka's WindowKeySchema / SessionKeySchema layouts).
Timestamped window stores log the plain value with the stored timestamp as record timestamp, as
Kafka's ChangeLoggingTimestampedWindowBytesStore does.
"""

from __future__ import annotations

from typing import Any

from strom.streams.state.context import StateStore, StateStoreContext
from strom.streams.state.internals.timestamps import split_timestamped


class _ChangeLogger:
    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped
        self._context: StateStoreContext | None = None

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self._context = context
        self.wrapped.init(context, root)

    def _log(self, binary_key: bytes | None, value: bytes | None, timestamped: bool) -> None:
        if binary_key is None:
            return  # the write was dropped as expired: nothing to log
        context = self._context
        assert context is not None, "store used before init"
        record_context = context.record_context
        timestamp = record_context.timestamp
        if timestamped and value is not None:
            timestamp, value = split_timestamped(value)
        context.log_change(self.wrapped.name, binary_key, value, timestamp, record_context.headers)

    def __getattr__(self, name: str) -> Any:
        # reads, flush, close and properties pass straight down
        return getattr(self.wrapped, name)


class ChangeLoggingWindowStore(_ChangeLogger):
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


class ChangeLoggingSessionStore(_ChangeLogger):
    def put(self, key: bytes, start: int, end: int, value: bytes | None) -> bytes | None:
        binary_key = self.wrapped.put(key, start, end, value)
        self._log(binary_key, value, False)
        return binary_key
