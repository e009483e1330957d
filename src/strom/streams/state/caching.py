"""The caching layer: Kafka's CachingKeyValueStore over the thread's record cache.

Writes go to the task's NamedCache only; they reach the layer below (changelog, store) and the flush
listener (downstream processors) when the cache evicts or is flushed at commit. Reads see the cache
first and fill it with clean entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from strom.streams.state.base import KeyValueIterator, WrappedStore, merge_sorted
from strom.streams.state.cache import DirtyEntry, LRUCacheEntry, ThreadCache
from strom.streams.state.context import RecordContext, StateStore, StateStoreContext, cache_namespace

BytesFlushListener = Callable[[bytes, bytes | None, bytes | None, int], None]
"""(key, new value, old value, timestamp) in bytes; the metered layer deserializes for the processor."""

_CLEAN = RecordContext(timestamp=-1)


class CachingKeyValueStore(WrappedStore):
    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._context: StateStoreContext | None = None
        self._cache: ThreadCache | None = None
        self._namespace = ""
        self._listener: BytesFlushListener | None = None
        self._send_old_values = False
        self._thread: threading.Thread | None = None
        self._named: Any = None

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self.wrapped.init(context, root)
        self._context = context
        self._cache = context.cache
        self._namespace = cache_namespace(context.task_id, self.name)
        self._cache.add_dirty_entry_flush_listener(self._namespace, self._flush_entries)
        self._named = self._cache.named_cache(self._namespace)
        self._lookup = self._named.entries.get
        self._mark_used = self._named.entries.move_to_end
        self._put_dirty = self._named.put_dirty
        self._thread = threading.current_thread()

    @property
    def cache_entries(self) -> Any:
        """The record cache's entries of this store (LRU order): a fused read looks keys up here."""
        return self._named.entries

    @property
    def context(self) -> StateStoreContext:
        assert self._context is not None, "store used before init"
        return self._context

    @property
    def put_dirty_raw(self) -> Callable[[bytes, bytes | None, RecordContext], None]:
        """The cache's per-record write, for a fused write that has the record context at hand."""
        return self._put_dirty

    def set_flush_listener(self, listener: BytesFlushListener, send_old_values: bool) -> bool:
        """Forward flushed entries to ``listener``; True tells the processor that caching is on."""
        self._listener = listener
        self._send_old_values = send_old_values
        return True

    def _flush_entries(self, entries: list[DirtyEntry]) -> None:
        context = self._context
        assert context is not None
        current = context.record_context
        wrapped = self.wrapped
        listener = self._listener
        try:
            for key, new, entry_context in entries:
                context.set_record_context(entry_context)
                if listener is None:
                    wrapped.put(key, new)
                    continue
                old = wrapped.get(key) if new is None or self._send_old_values else None
                # deleting a key the store never had: nothing to write, log or forward (as Kafka)
                if new is not None or old is not None:
                    wrapped.put(key, new)
                    listener(key, new, old if self._send_old_values else None, entry_context.timestamp)
        finally:
            context.set_record_context(current)

    def get(self, key: bytes) -> bytes | None:
        entry = self._lookup(key)
        if entry is not None:
            try:  # noqa: SIM105 - not contextlib.suppress: a context manager per read costs more
                self._mark_used(key)
            except KeyError:  # an interactive query's read raced with the task evicting the key
                pass
            return entry.value
        value = self.wrapped.get(key)
        # Only the task's own thread fills the cache: an interactive query must not trigger evictions.
        # A full cache gets no clean entry: it would only evict another entry and, with more keys than
        # fit, be evicted unread itself (at 1M keys every read misses); a read-modify-write puts the key
        # dirty right after anyway.
        cache = self._cache
        if (value is not None and cache.current_bytes < cache.max_cache_size_bytes  # type: ignore[union-attr]
                and threading.current_thread() is self._thread):
            cache.put(self._namespace, key, LRUCacheEntry(key, value, False, _CLEAN))  # type: ignore[union-attr]
        return value

    def put(self, key: bytes, value: bytes | None) -> None:
        self._put_dirty(key, value, self._context.record_context)  # type: ignore[union-attr]

    def _iterate(self, from_key: bytes | None, to_key: bytes | None, reverse: bool) -> KeyValueIterator:
        assert self._cache is not None, "store used before init"
        cached = self._cache.range(self._namespace, from_key, to_key, reverse)
        return merge_sorted(self.wrapped._iterate(from_key, to_key, reverse),
                            ((key, entry.value) for key, entry in cached), reverse)

    def flush(self) -> None:
        if self._cache is not None:
            self._cache.flush(self._namespace)
        self.wrapped.flush()

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close(self._namespace)
        self.wrapped.close()
