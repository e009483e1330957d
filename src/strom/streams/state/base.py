"""The byte-level key-value store API shared by inner stores (in-memory, RocksDB) and the layers over them.

Every store below the metered layer holds ``bytes`` keys and values ordered by key bytes (as Kafka's
``Bytes`` comparator). Subclasses implement ``get``, ``put`` and ``_iterate``; the derived operations
live here once. The layers themselves are in ``strom.streams.state.internals``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from itertools import takewhile
from typing import Any

__all__ = ["BytesStore", "KeyValueIterator", "merge_sorted"]

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
