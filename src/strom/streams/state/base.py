"""Shared plumbing of the byte-level key-value layers (inner stores, logging, caching, transactions).

Every layer stores ``bytes`` keys and values ordered by key bytes (as Kafka's ``Bytes`` comparator).
Subclasses implement ``get``, ``put`` and ``_iterate``; the derived operations live here once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from itertools import takewhile
from typing import Any

from strom.streams.state.context import StateStore, StateStoreContext

log = logging.getLogger(__name__)

KeyValueIterator = Iterator[tuple[bytes, bytes]]


class BytesStore:
    """A key-value store over bytes; the base of every layer below the metered store."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def put(self, key: bytes, value: bytes | None) -> None:
        raise NotImplementedError

    def _iterate(self, from_key: bytes | None, to_key: bytes | None, reverse: bool) -> KeyValueIterator:
        raise NotImplementedError

    def put_if_absent(self, key: bytes, value: bytes) -> bytes | None:
        old = self.get(key)
        if old is None:
            self.put(key, value)
        return old

    def put_all(self, entries: Sequence[tuple[bytes, bytes | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: bytes) -> bytes | None:
        old = self.get(key)
        self.put(key, None)
        return old

    def range(self, from_key: bytes | None, to_key: bytes | None) -> KeyValueIterator:
        if _inverted(from_key, to_key, self._name):
            return iter(())
        return self._iterate(from_key, to_key, False)

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> KeyValueIterator:
        if _inverted(from_key, to_key, self._name):
            return iter(())
        return self._iterate(from_key, to_key, True)

    def all(self) -> KeyValueIterator:
        return self._iterate(None, None, False)

    def reverse_all(self) -> KeyValueIterator:
        return self._iterate(None, None, True)

    def prefix_scan(self, prefix: Any, prefix_key_serializer: Any = None) -> KeyValueIterator:
        """Entries whose key starts with ``prefix`` (bytes, or serialized by ``prefix_key_serializer``)."""
        raw = prefix if prefix_key_serializer is None else prefix_key_serializer.serialize(None, prefix)
        return takewhile(lambda item: item[0].startswith(raw), self._iterate(raw, _successor(raw), False))


def _successor(prefix: bytes) -> bytes | None:
    """The smallest key after every key starting with ``prefix`` (None: there is none)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _inverted(from_key: bytes | None, to_key: bytes | None, name: str) -> bool:
    if from_key is not None and to_key is not None and from_key > to_key:
        log.warning("Range query on store %s with from key > to key returns nothing; "
                    "swap the bounds or use reverse_range", name)
        return True
    return False


class StoreLayer:
    """A layer over another store: its identity and lifecycle (open, flush, close) go straight down."""

    def __init__(self, wrapped: Any) -> None:
        self._name = wrapped.name
        self.wrapped = wrapped

    @property
    def name(self) -> str:
        return self._name

    @property
    def persistent(self) -> bool:
        return self.wrapped.persistent

    @property
    def is_open(self) -> bool:
        return self.wrapped.is_open

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self.wrapped.init(context, root)

    def flush(self) -> None:
        self.wrapped.flush()

    def close(self) -> None:
        self.wrapped.close()


class WrappedStore(StoreLayer, BytesStore):
    """A layer over another byte store: by default every call goes straight down."""

    def get(self, key: bytes) -> bytes | None:
        return self.wrapped.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.wrapped.put(key, value)

    def _iterate(self, from_key: bytes | None, to_key: bytes | None, reverse: bool) -> KeyValueIterator:
        return self.wrapped._iterate(from_key, to_key, reverse)

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()


def merge_sorted(first: KeyValueIterator, second: Iterator[tuple[bytes, bytes | None]],
                 reverse: bool) -> KeyValueIterator:
    """Merge two key-ordered iterators; ``second`` wins on equal keys and its None values hide keys.

    Used where uncommitted or cached writes (tombstones included) overlay a store.
    """
    sentinel = object()
    a = next(first, sentinel)
    b = next(second, sentinel)
    while a is not sentinel or b is not sentinel:
        if b is sentinel or (a is not sentinel and ((a[0] > b[0]) if reverse else (a[0] < b[0]))):
            yield a  # type: ignore[misc]
            a = next(first, sentinel)
            continue
        if a is not sentinel and a[0] == b[0]:  # type: ignore[index]
            a = next(first, sentinel)
        key, value = b  # type: ignore[misc]
        b = next(second, sentinel)
        if value is not None:
            yield key, value
