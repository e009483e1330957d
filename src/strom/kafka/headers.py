"""Record headers as Kafka's ``Headers``: an ordered, mutable list of ``Header(key, value)`` pairs in which a
key may repeat.

A ``Header`` is a 2-tuple, so a ``Headers`` is also the list of ``(key, value)`` tuples confluent-kafka
takes and returns: it goes to ``Producer.produce(headers=...)`` as it is, and ``Headers(message.headers())``
wraps what a consumer read. strom.tasks hands it to processors; strom.streams' records give it as
``record.headers`` (made on first access from the pairs the record was read with).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple, Self

__all__ = ["Header", "Headers"]


class Header(NamedTuple):
    key: str
    value: bytes | None


class Headers(list[Header]):
    """Kafka's Headers: ``add`` and ``remove`` return the headers, so calls chain."""

    def __init__(self, headers: Iterable[tuple[str, bytes | None]] | None = None) -> None:
        super().__init__(Header(key, value) for key, value in headers or ())

    def add(self, key: str, value: bytes | str | None) -> Self:
        """Appends a header (text is UTF-8 encoded); earlier ones of the same key stay."""
        self.append(Header(key, value.encode() if isinstance(value, str) else value))
        return self

    def remove(self, key: str) -> Self:
        """Removes every header of ``key``."""
        self[:] = [header for header in self if header.key != key]
        return self

    def last_header(self, key: str) -> Header | None:
        """The last header of ``key`` (the one that counts when a key repeats), or None."""
        for header in reversed(self):
            if header.key == key:
                return header
        return None

    def headers(self, key: str) -> Iterator[Header]:
        """Every header of ``key``, in order."""
        return (header for header in self if header.key == key)

    def to_array(self) -> list[Header]:
        return list(self)

    def __eq__(self, other: object) -> bool:
        """Equal to any list or tuple of the same ``(key, value)`` pairs, as the headers a record was
        read with are."""
        if isinstance(other, list | tuple):
            return list.__eq__(self, other if isinstance(other, list) else list(other))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list
