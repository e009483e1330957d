"""Operation counts of a metered store."""

from __future__ import annotations


class StoreMetrics:
    """Operation counts of one store. Counts only: timing every call would cost more than the calls.

    Plain int attributes, because a store counts on every get and put.
    """

    __slots__ = ("delete", "flush", "get", "prefix_scan", "put", "put_all", "put_if_absent", "range")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    @property
    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}
