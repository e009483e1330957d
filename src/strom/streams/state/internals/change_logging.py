"""The change-logging layer: every write to the store is also sent to the store's changelog topic.

Timestamped stores log the plain value with the stored timestamp as the record timestamp, as Kafka's
ChangeLoggingTimestampedKeyValueBytesStore does, so the changelog has Kafka's layout.
"""

from __future__ import annotations

from typing import Any

from strom.streams.state.context import StateStore, StateStoreContext
from strom.streams.state.internals.layer import KeyValueStoreLayer
from strom.streams.state.internals.timestamps import TIMESTAMP_SIZE, unpack_timestamp


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
