"""The caching layers: Kafka's CachingKeyValueStore, CachingWindowStore and CachingSessionStore over the
thread's record cache.

Writes go to the task's NamedCache only; they reach the layer below (changelog, store) and the flush
listener (downstream processors) when the cache evicts or is flushed at commit, so with caching on a
key or window emits its latest result once per commit instead of once per record. Reads see the cache
first; the key-value layer fills it with clean entries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from strom.streams.internals.compiled import Lines, compile_function, prefixed
from strom.streams.state.base import KeyValueIterator, merge_sorted
from strom.streams.state.cache import DirtyEntries, LRUCacheEntry, ThreadCache
from strom.streams.state.context import RecordContext, StateStore, StateStoreContext, cache_namespace
from strom.streams.state.internals.layer import (
    KeyValueStoreLayer,
    SessionStoreLayer,
    StoreLayer,
    WindowStoreLayer,
)
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP
from strom.streams.state.window import schemas

BytesFlushListener = Callable[[bytes, bytes | None, bytes | None, int], None]
"""(key, new value, old value, timestamp) in bytes; the metered layer deserializes for the processor."""
WindowFlushListener = Callable[[bytes, int, bytes | None, bytes | None, int], None]
"""(key, window start, new value, old value, timestamp) in bytes; the metered layer deserializes."""
SessionFlushListener = Callable[[bytes, int, int, bytes | None, bytes | None], None]
"""(key, session start, session end, new value, old value) in bytes; the metered layer deserializes."""

_CLEAN = RecordContext(timestamp=-1)
_pack_window_suffix = schemas.WINDOW_SUFFIX.pack


class CachingLayer(StoreLayer):
    """Wires a store to the task's record cache, the same for every kind of store; each kind defines
    ``_flush_entries`` (how its dirty entries reach the store below and the flush listener)."""

    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._context: StateStoreContext | None = None
        self._cache: ThreadCache | None = None
        self._namespace = ""
        self._listener: Any = None
        self._send_old_values = False

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self.wrapped.init(context, root)
        self._context = context
        self._cache = context.cache
        self._namespace = cache_namespace(context.task_id, self.name)
        self._cache.add_dirty_entry_flush_listener(self._namespace, self._flush_entries)
        named = self._cache.named_cache(self._namespace)
        # the per-record calls, bound once
        self._lookup = named.entries.get
        self._mark_used = named.entries.move_to_end
        self._put_dirty = named.put_dirty

    def _flush_entries(self, entries: DirtyEntries) -> None:
        raise NotImplementedError

    @property
    def cache_entries(self) -> Any:
        """The record cache's entries of this store (LRU order): a fused read looks keys up here."""
        return self._cache.named_cache(self._namespace).entries  # type: ignore[union-attr]

    @property
    def context(self) -> StateStoreContext:
        assert self._context is not None, "store used before init"
        return self._context

    @property
    def put_dirty_raw(self) -> Callable[[bytes, bytes | None, RecordContext], None]:
        """The cache's per-record write, for a fused write that has the record context at hand."""
        return self._put_dirty

    def set_flush_listener(self, listener: Any, send_old_values: bool) -> bool:
        """Forward flushed entries to ``listener``; True tells the processor that caching is on."""
        self._listener = listener
        self._send_old_values = send_old_values
        return True

    def flush(self) -> None:
        if self._cache is not None:
            self._cache.flush(self._namespace)
        self.wrapped.flush()

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close(self._namespace)
        self.wrapped.close()


class CachingKeyValueStore(CachingLayer, KeyValueStoreLayer):
    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._listener: BytesFlushListener | None = None
        self._thread: threading.Thread | None = None
        self._fused_listener: Lines | None = None
        self.flush_batch: Callable[[DirtyEntries], None] | None = None
        """How a flush's entries go down and on: compiled at the first flush (``fused_flush``), else
        ``flush_each``."""

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        super().init(context, root)
        self._thread = threading.current_thread()
        self.flush_batch = None  # compiled again for this context at the next flush

    def set_flush_listener(self, listener: Any, send_old_values: bool) -> bool:
        self._fused_listener = None  # a listener's lines come with fuse_flush, after this
        self.flush_batch = None
        return super().set_flush_listener(listener, send_old_values)

    def fuse_flush(self, lines: tuple[str, ...], names: dict[str, Any]) -> None:
        """The flush listener's work as lines of Python over the locals ``kb, wb, c`` (a flushed entry's
        key, value and record context, the value not None), names ``{p}``-prefixed: what the listener
        does, inlined in a flush's loop (``fused_flush``)."""
        self._fused_listener = (lines, names)
        self.flush_batch = None

    def _flush_entries(self, entries: DirtyEntries) -> None:
        flush = self.flush_batch
        if flush is None:
            flush = self.flush_batch = self.fused_flush() or self.flush_each
        flush(entries)

    def fused_flush(self) -> Callable[[DirtyEntries], None] | None:
        """One loop over a flush's entries doing what ``flush_each`` does per entry without a call per
        layer: the layers below give their write (the store buffer, the changelog record) and the
        metered layer and the processor their listener (decode, forward) as lines of Python, compiled
        into one function. Deletes take ``flush_one``. None when a layer gives no lines or the listener
        wants old values (``flush_each`` then)."""
        put = getattr(self.wrapped, "fused_put", None)
        put = None if put is None else put()
        if put is None or self._fused_listener is None or self._send_old_values or self._listener is None:
            return None
        context = self.context
        names = {"{p}context": context, "{p}set_record_context": context.set_record_context,
                 "{p}flush_one": self.flush_one}
        put_lines, put_names = prefixed(*put, "_w_")
        listener_lines, listener_names = prefixed(*self._fused_listener, "_l_")
        body = [line.replace("{p}", "_c_") for line in (
            "current = {p}context.record_context",
            "try:",
            "    for kb, wb, c in entries.fields():",
            "        {p}set_record_context(c)",
            "        if wb is None:",
            "            {p}flush_one(kb, wb, c)",
            "            continue",
            *("        " + line for line in (*put_lines, *listener_lines)),
            "finally:",
            "    {p}set_record_context(current)",
        )]
        names = {**prefixed((), names, "_c_")[1], **put_names, **listener_names}
        return compile_function(f"fused flush of {self.name}", "flush(entries)", body, names)

    def flush_each(self, entries: DirtyEntries) -> None:
        """A flush's entries one by one through the layers below and the listener."""
        context = self._context
        assert context is not None
        current = context.record_context
        try:
            for key, new, entry_context in entries:
                context.set_record_context(entry_context)
                self.flush_one(key, new, entry_context)
        finally:
            context.set_record_context(current)

    def flush_one(self, key: bytes, new: bytes | None, entry_context: RecordContext) -> None:
        """One flushed entry (its record context set): written down, then handed to the listener."""
        listener = self._listener
        if listener is None:
            self.wrapped.put(key, new)
            return
        old = self.wrapped.get(key) if new is None or self._send_old_values else None
        # deleting a key the store never had: nothing to write, log or forward (as Kafka)
        if new is not None or old is not None:
            self.wrapped.put(key, new)
            listener(key, new, old if self._send_old_values else None, entry_context.timestamp)

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


class CachingWindowStore(CachingLayer, WindowStoreLayer):
    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._listener: WindowFlushListener | None = None
        self._last_key: bytes | None = None
        self._last_start = -1
        self._last_binary = b""
        self.latest_start = -1
        """The latest window start written: bounds cache scans (no cached window starts later)."""

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        super().init(context, root)
        # reads below the cache by store key, bound once (the change-logging layer only delegates reads)
        self._get_binary = self.wrapped.get_binary

    def _flush_entries(self, entries: DirtyEntries) -> None:
        context = self._context
        assert context is not None
        current = context.record_context
        # entries keep the binary store key all the way down: no split and rebuild per entry
        put_binary, get_binary = self.wrapped.put_binary, self._get_binary
        listener, send_old_values = self._listener, self._send_old_values
        try:
            for binary_key, new, entry_context in entries:
                context.set_record_context(entry_context)
                # the old value matters only to forward it, or to tell whether a delete changes anything
                old = get_binary(binary_key) if listener is not None and (new is None or send_old_values) \
                    else None
                put_binary(binary_key, new)
                if listener is not None and (new is not None or old is not None):
                    key, start, _ = schemas.split_window_store_key(binary_key)
                    listener(key, start, new, old if send_old_values else None, entry_context.timestamp)
        finally:
            context.set_record_context(current)

    def put(self, key: bytes, value: bytes | None, window_start: int) -> bytes:
        if key is self._last_key and window_start == self._last_start:
            binary_key = self._last_binary
        else:
            binary_key = key + _pack_window_suffix(window_start, 0)  # schemas.window_store_key
        if window_start > self.latest_start:
            self.latest_start = window_start
        self._put_dirty(binary_key, value, self._context.record_context)  # type: ignore[union-attr]
        return binary_key

    def fetch(self, key: bytes, window_start: int) -> bytes | None:
        binary_key = key + _pack_window_suffix(window_start, 0)
        # an aggregation fetches then puts the same window: the put reuses this store key
        self._last_key, self._last_start, self._last_binary = key, window_start, binary_key
        entry = self._lookup(binary_key)
        if entry is not None:
            self._mark_used(binary_key)
            return entry.value
        return self._get_binary(binary_key)

    def fetch_range(self, key: bytes, time_from: int, time_to: int,
                    reverse: bool = False) -> Iterator[tuple[int, bytes]]:
        merged = {start: value for start, value in self.wrapped.fetch_range(key, time_from, time_to)}
        for _, start, value in self._cached(key, key, time_from, time_to):
            merged[start] = value
        for start in sorted(merged, reverse=reverse):
            if merged[start] is not None:
                yield start, merged[start]

    def fetch_key_range(self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int,
                        reverse: bool = False) -> Iterator[tuple[bytes, int, bytes]]:
        """Same order as the store below: segment by segment, key order within a segment."""
        merged = {(k, start): v for k, start, v in self.wrapped.fetch_key_range(key_from, key_to,
                                                                                time_from, time_to)}
        for cached_key, start, value in self._cached(key_from, key_to, time_from, time_to):
            merged[(cached_key, start)] = value
        interval = self.wrapped.segment_interval_ms
        order = sorted(merged, key=lambda ks: (ks[1] // interval, schemas.window_store_key(ks[0], ks[1])),
                       reverse=reverse)
        for key, start in order:
            if merged[(key, start)] is not None:
                yield key, start, merged[(key, start)]

    def all(self, reverse: bool = False) -> Iterator[tuple[bytes, int, bytes]]:
        return self.fetch_key_range(None, None, 0, MAX_TIMESTAMP, reverse)

    def _cached(self, key_from: bytes | None, key_to: bytes | None, time_from: int,
                time_to: int) -> Iterator[tuple[bytes, int, bytes | None]]:
        """Cached entries of keys in [key_from, key_to] (None: unbounded) and windows starting in
        [time_from, time_to]: the scan of the cache's sorted keys stops at the key range's upper bound."""
        assert self._cache is not None, "store used before init"
        time_from = max(time_from, self.wrapped.min_live_time())
        time_to = min(time_to, self.latest_start)  # no cached window starts later
        if time_from > time_to:
            return
        if key_from is not None and key_from == key_to:
            low = schemas.window_store_key(key_from, time_from, 0)
            high: bytes | None = schemas.window_store_key(key_from, time_to, schemas.MAX_SEQNUM)
        else:
            low = key_from
            high = None if key_to is None else schemas.window_key_upper_bound(key_to, time_to)
        for binary_key, entry in self._cache.range(self._namespace, low, high):
            key, start, _ = schemas.split_window_store_key(binary_key)
            if (time_from <= start <= time_to and (key_from is None or key >= key_from)
                    and (key_to is None or key <= key_to)):
                yield key, start, entry.value


class CachingSessionStore(CachingLayer, SessionStoreLayer):
    """Kafka's CachingSessionStore: session updates (removals included) wait in the record cache.

    A session aggregation reads every session of a key near each record, so the layer keeps an index
    of the sessions it cached per key; entries the cache evicted since are skipped (and were written
    below when they were flushed), and forgotten at each flush. Key-range reads use the cache's own
    sorted keys instead.
    """

    def __init__(self, wrapped: Any) -> None:
        super().__init__(wrapped)
        self._listener: SessionFlushListener | None = None
        self._by_key: dict[bytes, set[bytes]] = {}
        self._latest_end = -1  # bounds cache scans: no cached session ends later

    def _flush_entries(self, entries: DirtyEntries) -> None:
        context = self._context
        assert context is not None
        current = context.record_context
        try:
            for binary_key, new, entry_context in entries:
                key, start, end = schemas.split_session_store_key(binary_key)
                context.set_record_context(entry_context)
                needs_old = self._listener is not None and (new is None or self._send_old_values)
                old = self.wrapped.fetch_session(key, start, end) if needs_old else None
                self.wrapped.put(key, start, end, new)
                if self._listener is not None and (new is not None or old is not None):
                    self._listener(key, start, end, new, old if self._send_old_values else None)
        finally:
            context.set_record_context(current)

    def put(self, key: bytes, start: int, end: int, value: bytes | None) -> bytes:
        binary_key = schemas.session_store_key(key, start, end)
        self._put_dirty(binary_key, value, self._context.record_context)  # type: ignore[union-attr]
        self._by_key.setdefault(key, set()).add(binary_key)
        if end > self._latest_end:
            self._latest_end = end
        return binary_key

    def fetch_session(self, key: bytes, start: int, end: int) -> bytes | None:
        binary_key = schemas.session_store_key(key, start, end)
        entry = self._lookup(binary_key)
        if entry is not None:
            self._mark_used(binary_key)
            return entry.value
        return self.wrapped.fetch_session(key, start, end)

    def find_sessions(self, key_from: bytes | None, key_to: bytes | None, earliest_session_end: int,
                      latest_session_start: int,
                      reverse: bool = False) -> Iterator[tuple[bytes, int, int, bytes]]:
        """As the store below, with cached writes (and removals) applied; same order."""
        merged = {schemas.session_store_key(k, s, e): v for k, s, e, v in
                  self.wrapped.find_sessions(key_from, key_to, earliest_session_end, latest_session_start)}
        earliest_session_end = max(earliest_session_end, self.wrapped.min_live_time())
        for binary_key, value in self._cached(key_from, key_to):
            key, start, end = schemas.split_session_store_key(binary_key)
            if end >= earliest_session_end and start <= latest_session_start:
                merged[binary_key] = value
        interval = self.wrapped.segment_interval_ms
        order = sorted(merged, key=lambda b: (schemas.session_end_of(b) // interval, b), reverse=reverse)
        for binary_key in order:
            value = merged[binary_key]
            if value is not None:
                key, start, end = schemas.split_session_store_key(binary_key)
                yield key, start, end, value

    def _cached(self, key_from: bytes | None, key_to: bytes | None) -> list[tuple[bytes, bytes | None]]:
        """Cached sessions of keys in [key_from, key_to] (None: unbounded): one key through the per-key
        index, a key range through the cache's sorted keys up to the range's upper bound."""
        assert self._cache is not None, "store used before init"
        if key_from is not None and key_from == key_to:
            return self._cached_sessions_of(key_from)
        high = None if key_to is None else schemas.session_key_upper_bound(key_to, self._latest_end)
        found = []
        for binary_key, entry in self._cache.range(self._namespace, key_from, high):
            key = binary_key[:-schemas.SESSION_SUFFIX_SIZE]
            if (key_from is None or key >= key_from) and (key_to is None or key <= key_to):
                found.append((binary_key, entry.value))
        return found

    def _cached_sessions_of(self, key: bytes) -> list[tuple[bytes, bytes | None]]:
        binaries = self._by_key.get(key)
        if not binaries:
            return []
        found = []
        for binary_key in list(binaries):
            entry = self._lookup(binary_key)
            if entry is None:
                binaries.discard(binary_key)  # evicted (and written below when it was flushed)
            else:
                found.append((binary_key, entry.value))
        if not binaries:
            del self._by_key[key]
        return found

    def _forget_uncached(self) -> None:
        """Drop index entries of sessions the cache no longer holds (evicted, or flushed removals), so
        the index never outgrows the cache, even for keys that are never read again."""
        lookup = self._lookup
        for key, binaries in list(self._by_key.items()):
            binaries.difference_update([b for b in binaries if lookup(b) is None])
            if not binaries:
                del self._by_key[key]

    def flush(self) -> None:
        super().flush()
        if self._cache is not None:
            self._forget_uncached()

    def close(self) -> None:
        super().close()
        self._by_key.clear()
