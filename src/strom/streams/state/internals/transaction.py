"""Transactional state stores (as in KIP-892): uncommitted writes stay in a buffer above the inner store.

Key-value and versioned stores have this layer; window and session stores' segmented inner stores
buffer their uncommitted writes per segment themselves (``window/bytes_stores.py``), with the same
commit, abort and restore calls.

The task reads its own writes through the buffer. On commit the state manager applies the buffer
together with the new changelog offset in one atomic write (one RocksDB WriteBatch); on abort the
buffer is dropped and the inner store is still exactly at the last committed offset, so no wipe and
no full restore is needed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from strom.streams.internals.compiled import Lines, prefixed
from strom.streams.state.base import KeyValueIterator, merge_sorted
from strom.streams.state.context import ChangelogRecord, StateStore, StateStoreContext
from strom.streams.state.internals.layer import KeyValueStoreLayer
from strom.streams.state.internals.timestamps import with_timestamp
from strom.streams.state.key_index import SortedKeyIndex

_MISSING = object()


class TransactionalKeyValueStore(KeyValueStoreLayer):
    """Buffers writes to an inner store (in-memory or RocksDB) until the task commits."""

    def __init__(self, inner: Any, logged: bool, timestamped: bool) -> None:
        super().__init__(inner)
        self.logged = logged
        self.timestamped = timestamped
        self._buffer: dict[bytes, bytes | None] = {}
        self._index = SortedKeyIndex()

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self.wrapped.init(context, root)
        context.register_store(root, self, self.logged)

    @property
    def uncommitted_writes(self) -> int:
        return len(self._buffer)

    def get(self, key: bytes) -> bytes | None:
        value = self._buffer.get(key, _MISSING)
        if value is _MISSING:
            return self.wrapped.get(key)
        return value  # type: ignore[return-value]

    def put(self, key: bytes, value: bytes | None) -> None:
        buffer = self._buffer
        if key in buffer:
            buffer[key] = value
        else:
            buffer[key] = value
            self._index.added(key)  # after the insert: a concurrent scan then never misses the key

    def fused_get(self) -> Lines:
        """``r = get(kb)`` as lines of Python for a caller that inlines it (a cached store's miss);
        the store's own read inlined too when it gives it (``fused_get``); names ``{p}``-prefixed."""
        inner = getattr(self.wrapped, "fused_get", None)
        inner_lines, names = prefixed(*inner(), "{p}i_") if inner is not None else \
            (("r = {p}inner_get(kb)",), {"{p}inner_get": self.wrapped.get})
        lines = ("r = {p}buffer_get(kb, {p}missing)", "if r is {p}missing:",
                 *("    " + line for line in inner_lines))
        return lines, {**names, "{p}buffer_get": self._buffer.get, "{p}missing": _MISSING}

    def fused_put(self) -> Lines:
        """``put(kb, wb)`` as lines of Python for a caller that inlines it (a record cache's flush);
        names ``{p}``-prefixed."""
        lines = (
            "if kb in {p}buffer:",
            "    {p}buffer[kb] = wb",
            "else:",
            "    {p}buffer[kb] = wb",
            "    if not {p}index.resorting:",  # else added has nothing to note
            "        {p}index.added(kb)",  # after the insert: a concurrent scan then never misses the key
        )
        return lines, {"{p}buffer": self._buffer, "{p}index": self._index}

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """``put`` of each entry, under one lock of the key index for the batch."""
        buffer = self._buffer
        with self._index.adding() as added:
            for key, value in entries:
                if key not in buffer:
                    added.append(key)
                buffer[key] = value

    def _iterate(self, from_key: bytes | None, to_key: bytes | None, reverse: bool) -> KeyValueIterator:
        committed = self.wrapped._iterate(from_key, to_key, reverse)
        if not self._buffer:
            return committed
        buffer = self._buffer
        keys = self._index.between(buffer, from_key, to_key)
        if reverse:
            keys.reverse()
        pending = [(key, value) for key in keys if (value := buffer.get(key, _MISSING)) is not _MISSING]
        return merge_sorted(committed, iter(pending), reverse)  # type: ignore[arg-type]

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries() + len(self._buffer)

    @property
    def committed_offset(self) -> int | None:
        return self.wrapped.committed_offset

    def committed_reader(self) -> TransactionalKeyValueStore:
        """A copy of this layer without the uncommitted writes, to read the committed state from
        another thread (interactive queries) while the task goes on writing to this one."""
        reader = copy.copy(self)
        reader._buffer, reader._index = {}, SortedKeyIndex()
        return reader

    def commit(self, changelog_offset: int | None) -> None:
        self.wrapped.write_batch(self._buffer.items(), changelog_offset)
        self._clear()

    def abort(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._buffer.clear()
        self._index.clear()

    def restore(self, records: Sequence[ChangelogRecord]) -> None:
        """Write committed changelog records straight to the inner store, with the offset after the last."""
        if not records:
            return
        if self._buffer:
            raise RuntimeError(f"Store {self.name} has uncommitted writes; restore before processing")
        # generators: each write is made as the store takes it (no list of live tuples per batch)
        if self.timestamped:
            writes = ((key, None if value is None else with_timestamp(timestamp, value))
                      for key, value, _, timestamp in records)
        else:
            writes = ((key, value) for key, value, _, _ in records)
        # a store that loads faster in bulk (RocksDB) has restore_batch
        getattr(self.wrapped, "restore_batch", self.wrapped.write_batch)(writes, records[-1][2] + 1)

    def wipe(self) -> None:
        self._clear()
        self.wrapped.wipe()

    def close(self) -> None:
        self._clear()
        self.wrapped.close()


class VersionedTransaction(TransactionalKeyValueStore):
    """The transactional buffer of a versioned store: a changelog record is a version, not an entry of
    the inner store, so restoring replays each through the history logic, then commits."""

    replay: Callable[[bytes, bytes | None, int], int]

    def restore(self, records: Sequence[ChangelogRecord]) -> None:
        if not records:
            return
        if self.uncommitted_writes:
            raise RuntimeError(f"Store {self.name} has uncommitted writes; restore before processing")
        for key, value, _, timestamp in records:
            self.replay(key, value, timestamp)
        self.commit(records[-1][2] + 1)
