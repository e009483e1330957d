"""The record cache: Kafka Streams' ThreadCache and NamedCache.

One ThreadCache per thread holds a NamedCache per cached store per task, all sharing one byte
budget (``statestore.cache.max.bytes`` divided among threads). A put marks the entry dirty; when the
thread's caches exceed the budget, the least recently used entry of the cache just written is evicted,
and evicting a dirty entry flushes *all* dirty entries of that cache, in arrival order, to the cache's
flush listener (the caching store, which writes them down and forwards them). Flushed entries stay
cached as clean entries; flushed tombstones leave the cache.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import NamedTuple

from strom.errors import ConfigError
from strom.streams.state.context import RecordContext
from strom.streams.state.key_index import SortedKeyIndex

__all__ = [
    "DEFAULT_CACHE_MAX_BYTES", "DirtyEntries", "DirtyEntry", "DirtyEntryFlushListener", "LRUCacheEntry",
    "NamedCache", "ThreadCache", "thread_cache_bytes",
]

log = logging.getLogger(__name__)

DEFAULT_CACHE_MAX_BYTES = 10 * 1024 * 1024
"""Kafka's default ``statestore.cache.max.bytes``."""

# Per entry beyond the key's and value's bytes, what an entry really costs in CPython (3.11, 64-bit;
# measured with tracemalloc, tests/streams/state/test_cache_memory.py): the bytes objects' headers
# (2 x 33), the LRUCacheEntry (72), its RecordContext tuple with timestamp and offset ints (80 + 2 x 32),
# and the slots of the LRU OrderedDict, the dirty-key dict and the key index (~150). Kafka counts 45
# bytes here (its JVM entry); counting Python's ~430 keeps a cache's real memory near
# ``statestore.cache.max.bytes`` instead of 6x over it.
_ENTRY_OVERHEAD = 430


def thread_cache_bytes(total_bytes: int, num_threads: int) -> int:
    """Each thread's share of ``statestore.cache.max.bytes``: the budget is split evenly."""
    if total_bytes < 0:
        raise ConfigError.bad_value("statestore.cache.max.bytes", total_bytes, "a size in bytes >= 0")
    if num_threads < 1:
        raise ConfigError.bad_value("num.stream.threads", num_threads, "an integer >= 1")
    return total_bytes // num_threads


class LRUCacheEntry:
    """A cached value (None is a tombstone) with the context of the record that wrote it."""

    __slots__ = ("context", "dirty", "size", "value")

    def __init__(self, key: bytes, value: bytes | None, dirty: bool, context: RecordContext) -> None:
        self.value = value
        self.dirty = dirty
        self.context = context
        self.size = _entry_size(key, value, context)


def _entry_size(key: bytes, value: bytes | None, context: RecordContext) -> int:
    size = _ENTRY_OVERHEAD + len(key)
    if value is not None:
        size += len(value)
    topic = context[1]
    if topic:
        size += len(topic)
    if context[4]:
        for name, header_value in context[4]:
            size += len(name) + (len(header_value) if header_value else 0)
    return size


class DirtyEntry(NamedTuple):
    """What a flush hands to the listener: the key, the value to write (None deletes), its context."""

    key: bytes
    value: bytes | None
    context: RecordContext


class DirtyEntries:
    """A flush's entries in flush order, kept as three lists: iterating makes each ``DirtyEntry`` as it is
    reached; ``fields`` gives plain ``(key, value, context)`` tuples (the fused flush's loop). No object
    per entry outlives its turn: a flush of the whole cache (at many keys, every eviction of a dirty
    entry) then moves nothing into the garbage collector's older generations, whose full collections
    would otherwise come the more often, the more a flush holds."""

    __slots__ = ("contexts", "keys", "values")

    def __init__(self, keys: list[bytes], values: list[bytes | None], contexts: list[RecordContext]) -> None:
        self.keys, self.values, self.contexts = keys, values, contexts

    def __iter__(self) -> Iterator[DirtyEntry]:
        return map(_new_tuple, repeat(DirtyEntry), self.fields())

    def __len__(self) -> int:
        return len(self.keys)

    def fields(self) -> Iterator[tuple[bytes, bytes | None, RecordContext]]:
        return zip(self.keys, self.values, self.contexts, strict=True)


DirtyEntryFlushListener = Callable[[DirtyEntries], None]
_new_tuple = tuple.__new__  # makes a DirtyEntry without the NamedTuple's Python-level __new__ (hot path)
_new_entry = object.__new__  # an LRUCacheEntry whose slots the caller sets (no __init__ call per insert)


class NamedCache:
    """One store's cache in one task: entries in LRU order (eldest first) and dirty keys in arrival order."""

    def __init__(self, name: str, owner: ThreadCache) -> None:
        self.name = name
        self._owner = owner
        self._entries: OrderedDict[bytes, LRUCacheEntry] = OrderedDict()
        self._index = SortedKeyIndex()
        self._dirty: dict[bytes, None] = {}
        self._listener: DirtyEntryFlushListener | None = None
        self.size_bytes = 0
        self.put_dirty = self._put_dirty_function()

    @property
    def entries(self) -> OrderedDict[bytes, LRUCacheEntry]:
        """The entries in LRU order, eldest first. A caching store's per-record read looks keys up here
        directly, and marks a hit used with ``move_to_end`` as ``get`` does."""
        return self._entries

    def set_listener(self, listener: DirtyEntryFlushListener) -> None:
        self._listener = listener

    def __len__(self) -> int:
        return len(self._entries)

    def dirty_keys(self) -> list[bytes]:
        """Dirty keys in the order their latest write arrived."""
        return list(self._dirty)

    def get(self, key: bytes) -> LRUCacheEntry | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: bytes, entry: LRUCacheEntry) -> None:
        if entry.dirty and self._listener is None:
            raise RuntimeError(f"No flush listener registered for cache {self.name!r}; "
                               "dirty entries could never be written")
        entries = self._entries
        old = entries.get(key)
        delta = entry.size
        entries[key] = entry
        if old is not None:
            delta -= old.size
            entries.move_to_end(key)
        else:
            self._index.added(key)  # after the insert: a concurrent scan then never misses the key
        if entry.dirty:
            # remove then add, so the order is the arrival order of the latest writes
            dirty = self._dirty
            dirty.pop(key, None)
            dirty[key] = None
        self.size_bytes += delta
        self._owner.current_bytes += delta

    def _put_dirty_function(self) -> Callable[[bytes, bytes | None, RecordContext], None]:
        """``put_dirty``: a caching store's per-record write, as ThreadCache.put of a dirty entry
        (counted, then evicting over budget), updating a cached entry in place: no new object per
        write. A closure over the cache's dicts (they are cleared, never replaced): it runs per record,
        and at many keys nearly every record inserts a new entry and evicts the eldest, so both are
        inlined (``evict`` is the same for the first entry evicted; ``maybe_evict`` takes the rest)."""
        owner, entries, dirty, put = self._owner, self._entries, self._dirty, self.put
        lookup, mark_used, undirty = entries.get, entries.move_to_end, dirty.pop
        evict_eldest = entries.popitem
        index = self._index
        index_added, index_removed = index.added, index.removed

        def put_dirty(key: bytes, value: bytes | None, context: RecordContext) -> None:
            owner.num_puts += 1
            if context[4]:
                size = _entry_size(key, value, context)
            else:  # the common case, inlined: no headers
                topic = context[1]
                size = (_ENTRY_OVERHEAD + len(key) + (0 if value is None else len(value))
                        + (len(topic) if topic else 0))
            entry = lookup(key)
            if entry is None:
                if self._listener is None:
                    put(key, LRUCacheEntry(key, value, True, context))  # raises: no listener
                # put, inlined: a key not cached is not dirty either
                entry = _new_entry(LRUCacheEntry)
                entry.value, entry.dirty, entry.context, entry.size = value, True, context, size
                entries[key] = entry
                if not index.resorting:
                    index_added(key)  # after the insert: a concurrent scan then never misses the key
                dirty[key] = None
            else:
                mark_used(key)
                entry.value, entry.dirty, entry.context = value, True, context
                undirty(key, None)  # remove then add: the order is the arrival order of the latest writes
                dirty[key] = None
                size -= entry.size
                if not size:  # an update of the same size (a count, a fixed-width aggregate): budget holds
                    return
                entry.size += size
            current = owner.current_bytes + size
            if current <= owner.max_cache_size_bytes:
                owner.current_bytes = current
                self.size_bytes += size
            else:  # evict, inlined (the two sizes counted at once)
                eldest_key, eldest = evict_eldest(False)
                if not index.resorting:  # the next scan re-sorts: nothing to count
                    index_removed()
                size -= eldest.size
                owner.current_bytes += size
                self.size_bytes += size
                owner.num_evicts += 1
                if eldest.dirty:
                    self._flush(eldest_key, eldest)
                if owner.current_bytes > owner.max_cache_size_bytes:
                    owner.maybe_evict(self)

        return put_dirty

    def delete(self, key: bytes) -> LRUCacheEntry | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._index.removed()
            self.size_bytes -= entry.size
            self._owner.current_bytes -= entry.size
            self._dirty.pop(key, None)
        return entry

    def evict(self) -> None:
        """Drop the least recently used entry; if it was dirty, flush every dirty entry with it."""
        if not self._entries:
            return
        key, eldest = self._entries.popitem(last=False)
        self._index.removed()
        self.size_bytes -= eldest.size
        self._owner.current_bytes -= eldest.size
        if eldest.dirty:
            self._flush(key, eldest)

    def flush(self) -> None:
        self._flush()

    def _flush(self, evicted_key: bytes | None = None, evicted: LRUCacheEntry | None = None) -> None:
        """Hands every dirty entry, in arrival order, to the listener; ``evicted`` (just removed, dirty)
        goes first."""
        dirty = self._dirty
        if evicted is None and not dirty:
            return
        keys: list[bytes] = []
        values: list[bytes | None] = []
        contexts: list[RecordContext] = []
        if evicted is not None:
            dirty.pop(evicted_key, None)  # type: ignore[arg-type]
            keys.append(evicted_key)  # type: ignore[arg-type]
            values.append(evicted.value)
            contexts.append(evicted.context)
        first = len(keys)  # an evicted entry has left the cache already: nothing to delete
        keys += dirty
        cached, add_value, add_context = self._entries, values.append, contexts.append
        deleted = False
        for key in dirty:
            entry = cached[key]
            value = entry.value
            add_value(value)
            add_context(entry.context)
            entry.dirty = False
            if value is None:
                deleted = True
        # cleared before the listener runs: the listener may write to caches again (re-entrant)
        dirty.clear()
        assert self._listener is not None
        self._listener(DirtyEntries(keys, values, contexts))
        if deleted:
            for key, value in zip(keys[first:], values[first:], strict=True):
                if value is None:
                    entry = cached.get(key)
                    if entry is not None and entry.value is None and not entry.dirty:  # not rewritten
                        self.delete(key)

    def sorted_items(self, from_key: bytes | None, to_key: bytes | None,
                     reverse: bool = False) -> list[tuple[bytes, LRUCacheEntry]]:
        """A snapshot of the entries with from_key <= key <= to_key, in key order."""
        entries = self._entries
        keys = self._index.between(entries, from_key, to_key)
        if reverse:
            keys.reverse()
        snapshot = []
        for key in keys:
            entry = entries.get(key)
            if entry is not None:
                snapshot.append((key, entry))
        return snapshot

    def clear(self) -> None:
        self._entries.clear()
        self._index.clear()
        self._dirty.clear()
        self._owner.current_bytes -= self.size_bytes
        self.size_bytes = 0


class ThreadCache:
    """All NamedCaches of one thread under one byte budget."""

    def __init__(self, max_cache_size_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        if max_cache_size_bytes < 0:
            raise ConfigError.bad_value("statestore.cache.max.bytes", max_cache_size_bytes,
                                        "a size in bytes >= 0")
        self.max_cache_size_bytes = max_cache_size_bytes
        self._caches: dict[str, NamedCache] = {}
        self.current_bytes = 0
        self.num_puts = 0
        self.num_gets = 0
        self.num_evicts = 0
        self.num_flushes = 0

    def size_bytes(self) -> int:
        return self.current_bytes

    def named_cache(self, namespace: str) -> NamedCache:
        cache = self._caches.get(namespace)
        if cache is None:
            cache = self._caches[namespace] = NamedCache(namespace, self)
        return cache

    def add_dirty_entry_flush_listener(self, namespace: str, listener: DirtyEntryFlushListener) -> None:
        self.named_cache(namespace).set_listener(listener)

    def get(self, namespace: str, key: bytes) -> LRUCacheEntry | None:
        self.num_gets += 1
        cache = self._caches.get(namespace)
        return None if cache is None else cache.get(key)

    def put(self, namespace: str, key: bytes, entry: LRUCacheEntry) -> None:
        self.num_puts += 1
        cache = self._caches.get(namespace)
        if cache is None:
            cache = self.named_cache(namespace)
        cache.put(key, entry)
        if self.current_bytes > self.max_cache_size_bytes:
            self.maybe_evict(cache)

    def put_dirty(self, namespace: str, key: bytes, value: bytes | None, context: RecordContext) -> None:
        """A caching store's per-record write: like ``put`` of a dirty entry, without a new entry object
        when the key is cached already (the hot path of every cached aggregation)."""
        self.named_cache(namespace).put_dirty(key, value, context)

    def maybe_evict(self, cache: NamedCache) -> None:
        """Evicts from ``cache`` (just written) while the thread's caches are over budget."""
        evicted = 0
        entries, evict, limit = cache.entries, cache.evict, self.max_cache_size_bytes
        # the put may have flushed into other caches; if this one is empty there is nothing to evict
        while self.current_bytes > limit and entries:
            evict()
            evicted += 1
        self.num_evicts += evicted
        if evicted and log.isEnabledFor(logging.DEBUG):
            log.debug("Evicted %d entries from cache %s", evicted, cache.name)

    def flush(self, namespace: str) -> None:
        """Flush all dirty entries of one store's cache (at commit, and when the store is flushed)."""
        self.num_flushes += 1
        cache = self._caches.get(namespace)
        if cache is not None:
            cache.flush()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Cache stats on flush: #puts=%d, #gets=%d, #evicts=%d, #flushes=%d",
                      self.num_puts, self.num_gets, self.num_evicts, self.num_flushes)

    def range(self, namespace: str, from_key: bytes | None, to_key: bytes | None,
              reverse: bool = False) -> list[tuple[bytes, LRUCacheEntry]]:
        cache = self._caches.get(namespace)
        return [] if cache is None else cache.sorted_items(from_key, to_key, reverse)

    def clear(self, namespace: str) -> None:
        """Drop a cache's entries without flushing them (a task aborts its uncommitted work)."""
        cache = self._caches.get(namespace)
        if cache is not None:
            cache.clear()

    def close(self, namespace: str) -> None:
        """Remove a store's cache (its store closes); unflushed entries are dropped."""
        cache = self._caches.get(namespace)
        if cache is None:
            return
        if cache.dirty_keys():
            log.warning("Closing cache %s with %d unflushed entries; they are dropped",
                        namespace, len(cache.dirty_keys()))
        cache.clear()
        del self._caches[namespace]

    def resize(self, max_cache_size_bytes: int) -> None:
        """Change the budget (the number of threads changed); shrinking evicts across all caches."""
        self.max_cache_size_bytes = max_cache_size_bytes
        while self.size_bytes() > max_cache_size_bytes:
            for cache in list(self._caches.values()):
                if self.size_bytes() <= max_cache_size_bytes:
                    break
                cache.evict()
                self.num_evicts += 1
