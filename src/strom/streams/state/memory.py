"""The in-memory key-value store: a dict for reads and writes, plus a lazily sorted key index for scans."""

from __future__ import annotations

from collections.abc import ItemsView, Iterable
from typing import Any

from strom.errors import InvalidStateStoreError
from strom.streams.state.base import BytesStore, KeyValueIterator
from strom.streams.state.context import StateStore, StateStoreContext
from strom.streams.state.key_index import SortedKeyIndex

__all__ = ["InMemoryKeyValueStore"]

_DICT_ITEMS = type({}.items())


class InMemoryKeyValueStore(BytesStore):
    """Kafka's InMemoryKeyValueStore; iterators see a snapshot of the keys taken when they start."""

    persistent = False

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._data: dict[bytes, bytes] = {}
        self._index = SortedKeyIndex()
        self._open = False
        self.committed_offset: int | None = None

    @property
    def is_open(self) -> bool:
        return self._open

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self._open = True

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def fused_get(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        """``r = get(kb)`` as lines of Python for a caller that inlines it; names ``{p}``-prefixed."""
        return ("r = {p}data_get(kb)",), {"{p}data_get": self._data.get}

    def put(self, key: bytes, value: bytes | None) -> None:
        data = self._data
        if value is None:
            if data.pop(key, None) is not None:
                self._index.removed()
            return
        if key in data:
            data[key] = value
        else:
            data[key] = value
            self._index.added(key)  # after the insert: a concurrent scan then never misses the key

    def _iterate(self, from_key: bytes | None, to_key: bytes | None, reverse: bool) -> KeyValueIterator:
        if not self._open:
            raise InvalidStateStoreError(f"Store {self.name} is not open; use it between init and close.")
        snapshot = self._index.between(self._data, from_key, to_key)
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
        """Apply writes and record the changelog offset they bring the store to (offset None: unchanged),
        under one lock of the key index."""
        index = self._index
        with index.adding() as added:
            if index.resorting and type(writes) is _DICT_ITEMS:
                self._update(writes)
            else:
                self._write_each(writes, added)
        if changelog_offset is not None:
            self.committed_offset = changelog_offset

    def _update(self, writes: ItemsView[bytes, bytes | None]) -> None:
        """``write_batch``'s writes when no new key needs noting (the index re-sorts the dict's keys at the
        next scan, and none runs meanwhile: the batch holds the index's lock) and each key comes once (a
        dict's items): one update in C, then the deletes (a removed key needs no noting either). At 1M
        keys nearly every write of a commit is a key the store's dict must look up."""
        data = self._data
        data.update(writes)
        if None in writes.mapping.values():
            for key, value in writes:
                if value is None:
                    del data[key]

    def _write_each(self, writes: Iterable[tuple[bytes, bytes | None]], added: list[bytes]) -> None:
        """``put`` of each write, inlined, new keys appended to ``added``."""
        data, index = self._data, self._index
        for key, value in writes:
            if value is None:
                if data.pop(key, None) is not None:
                    index.removed()
            elif key in data:
                data[key] = value
            else:
                data[key] = value
                added.append(key)

    def wipe(self) -> None:
        self._data.clear()
        self._index.clear()
        self.committed_offset = None

    def flush(self) -> None:
        """Nothing to do: memory holds everything."""

    def close(self) -> None:
        """Memory is released: an in-memory store starts empty and restores from its changelog."""
        self._open = False
        self.wipe()
