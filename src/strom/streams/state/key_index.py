"""A lazily sorted index over the keys of a dict, for range scans over dict-backed byte stores.

Keeping a sorted list exact on every insert costs O(n) per new key (a million keys: minutes), and
sorting all keys on every scan costs O(n log n) per scan. Instead, writes only note new keys and
removals leave stale entries behind; the next scan folds the new keys in (a few by binary insertion,
many by re-sorting the dict's keys, which also drops stale ones). Scans get a snapshot of the keys in
range, which may hold removed keys: callers look each key up and skip the missing ones.

The in-memory store, the transactional write buffer and the record cache each keep one.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterator
from contextlib import contextmanager

__all__ = ["INSERT_LIMIT", "SortedKeyIndex"]

INSERT_LIMIT = 64
"""Up to this many new keys are inserted one by one; more trigger a re-sort."""


class SortedKeyIndex:
    """Locked, because an interactive query may scan from another thread while the task writes."""

    __slots__ = ("_index", "_lock", "_new", "_stale", "resorting")

    def __init__(self) -> None:
        self._index: list[bytes] = []
        self._new: list[bytes] = []
        self.resorting = False
        """The next scan re-sorts the dict's keys: nothing else is kept, and ``added`` has nothing to
        note, until then (a caller may skip calling it; read-only outside)."""
        self._stale = 0
        self._lock = threading.Lock()

    def added(self, key: bytes) -> None:
        """``key`` was not in the dict and now is. Memory stays bounded without scans: past
        INSERT_LIMIT new keys the index is dropped and rebuilt by the next scan."""
        if self.resorting:  # read unlocked: ``between`` clears it before it lists the dict's keys
            return
        with self._lock:
            if self.resorting:
                return
            new = self._new
            new.append(key)
            if len(new) > INSERT_LIMIT:
                self._drop_index()

    @contextmanager
    def adding(self) -> Iterator[list[bytes]]:
        """A list to append keys to as ``added`` would take them, one by one, indexed when the block
        ends: one lock for a batch of writes. Scans wait for the block, so none sees a key in the
        dict that the index lacks."""
        keys: list[bytes] = []
        with self._lock:
            try:
                yield keys
            finally:
                self._new.extend(keys)  # as many added() calls: the same bound on memory
                if self.resorting or len(self._new) > INSERT_LIMIT:
                    self._drop_index()

    def _drop_index(self) -> None:
        """Keep nothing until the next scan re-sorts the dict's keys (under the lock)."""
        self.resorting = True
        self._index = []
        self._new = []

    def removed(self) -> None:
        """A key left the dict (its index entry goes stale)."""
        self._stale += 1

    def clear(self) -> None:
        with self._lock:
            self._index = []
            self._new = []
            self.resorting = False
            self._stale = 0

    def between(self, keys: Collection[bytes], from_key: bytes | None, to_key: bytes | None) -> list[bytes]:
        """Sorted snapshot of the indexed keys with from_key <= key <= to_key; ``keys`` is the dict."""
        with self._lock:
            index, new = self._index, self._new
            if self.resorting or self._stale > len(index) // 2 + INSERT_LIMIT:
                # cleared first: an unlocked ``added`` that still saw it set inserted its key before,
                # so the keys listed now hold it
                self.resorting = False
                self._stale = 0
                self._index = index = sorted(list(keys))
            else:
                for key in new:
                    at = bisect_left(index, key)
                    if at == len(index) or index[at] != key:  # a removed key may still be indexed
                        index.insert(at, key)
            new.clear()
            lo = 0 if from_key is None else bisect_left(index, from_key)
            hi = len(index) if to_key is None else bisect_right(index, to_key)
            return index[lo:hi]
