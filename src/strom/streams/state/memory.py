"""The in-memory key-value store: a dict for reads and writes, plus a key index sorted lazily for scans.

Keeping a sorted list up to date on every insert costs O(n) per new key (a million keys: minutes), so
writes only note new keys and deletes leave stale index entries behind; the first scan after writes
folds them in: a few new keys by binary insertion, many by re-sorting the dict's keys.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

from strom.errors import InvalidStateStoreError
from strom.streams.state.base import BytesStore, KeyValueIterator
from strom.streams.state.context import StateStore, StateStoreContext

_INSERT_LIMIT = 64
"""Up to this many new keys are inserted one by one into the index; more trigger a re-sort."""


class InMemoryKeyValueStore(BytesStore):
    """Kafka's InMemoryKeyValueStore; iterators see a snapshot of the keys taken when they start."""

    persistent = False

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._data: dict[bytes, bytes] = {}
        self._index: list[bytes] = []  # sorted; may hold deleted keys, which scans skip
        self._new_keys: list[bytes] = []  # added since the index was last brought up to date
        self._deleted = 0  # stale index entries, roughly
        self._index_lock = threading.Lock()
        self._open = False
        self.committed_offset: int | None = None

    @property
    def is_open(self) -> bool:
        return self._open

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self._open = True

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        data = self._data
        if value is None:
            if data.pop(key, None) is not None:
                self._deleted += 1
            return
        if key not in data:
            with self._index_lock:
                self._new_keys.append(key)
        data[key] = value

    def _keys_between(self, from_key: bytes | None, to_key: bytes | None) -> list[bytes]:
        """A sorted snapshot of the indexed keys in range; locked because an interactive query may
        scan from another thread while the task writes."""
        with self._index_lock:
            index, new_keys = self._index, self._new_keys
            if len(new_keys) > _INSERT_LIMIT or self._deleted > len(index) // 2 + _INSERT_LIMIT:
                self._index = index = sorted(list(self._data))
                self._deleted = 0
            else:
                for key in new_keys:
                    at = bisect_left(index, key)
                    if at == len(index) or index[at] != key:  # a deleted key may still be indexed
                        index.insert(at, key)
            new_keys.clear()
            lo = 0 if from_key is None else bisect_left(index, from_key)
            hi = len(index) if to_key is None else bisect_right(index, to_key)
            return index[lo:hi]

    def _iterate(self, from_key: bytes | None, to_key: bytes | None, reverse: bool) -> KeyValueIterator:
        if not self._open:
            raise InvalidStateStoreError(f"Store {self.name} is not open; use it between init and close.")
        snapshot = self._keys_between(from_key, to_key)
        if reverse:
            snapshot.reverse()
        return self._lookup(snapshot)

    def _lookup(self, keys: list[bytes]) -> KeyValueIterator:
        data = self._data
        for key in keys:
            value = data.get(key)
            if value is not None:
                yield key, value

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def write_batch(self, writes: Iterable[tuple[bytes, bytes | None]], changelog_offset: int | None) -> None:
        """Apply writes and record the changelog offset they bring the store to (offset None: unchanged)."""
        for key, value in writes:
            self.put(key, value)
        if changelog_offset is not None:
            self.committed_offset = changelog_offset

    def wipe(self) -> None:
        self._data.clear()
        self._index.clear()
        self._new_keys.clear()
        self._deleted = 0
        self.committed_offset = None

    def flush(self) -> None:
        """Nothing to do: memory holds everything."""

    def close(self) -> None:
        """Memory is released: an in-memory store starts empty and restores from its changelog."""
        self._open = False
        self.wipe()
