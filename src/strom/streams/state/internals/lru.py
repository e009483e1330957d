"""Kafka's ``Stores.lru_map``: an in-memory key-value store that keeps at most ``max_entries`` keys,
evicting the least recently read or written one.

The eviction is a layer above the change-logging one, so an evicted key is deleted in the changelog too
(as Kafka's MemoryLRUCache tells its changelogger) and a restored store holds what the live one held.
After a restore the recency order is unknown: the restored keys count as read in key order.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from strom.streams.state.internals.layer import KeyValueStoreLayer


class LRUEvictingStore(KeyValueStoreLayer):
    def __init__(self, wrapped: Any, max_entries: int) -> None:
        super().__init__(wrapped)
        self.max_entries = max_entries
        self._recency: OrderedDict[bytes, None] | None = None  # built on first use, after any restore

    def _order(self) -> OrderedDict[bytes, None]:
        if self._recency is None:
            self._recency = OrderedDict((key, None) for key, _ in self.wrapped.all())
        return self._recency

    def get(self, key: bytes) -> bytes | None:
        value = self.wrapped.get(key)
        if value is not None:
            order = self._order()
            if key in order:
                order.move_to_end(key)
        return value

    def put(self, key: bytes, value: bytes | None) -> None:
        self.wrapped.put(key, value)
        order = self._order()
        if value is None:
            order.pop(key, None)
            return
        order[key] = None
        order.move_to_end(key)
        while len(order) > self.max_entries:
            eldest, _ = order.popitem(last=False)
            self.wrapped.put(eldest, None)
