"""Kafka's overloaded window store reads, chosen by the number of arguments, over strom's explicit names:

- ``fetch(key, window_start)``: the value of one window (each store's own ``fetch``);
- ``fetch(key, time_from, time_to)``: ``fetch_range``, (window start, value) oldest first;
- ``fetch(key_from, key_to, time_from, time_to)``: ``fetch_key_range``, (Windowed key, value);
- ``backward_fetch`` with three or four arguments: the same, newest first.

One implementation serves the stores processors use, the test driver's plain-value view and the
interactive-query views: each defines the explicit reads and its single-window ``fetch``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["WindowFetches"]


class WindowFetches:
    """``backward_fetch`` and the range forms of ``fetch``; a store's ``fetch(key, window_start, *more)``
    calls ``self.fetch_more(key, window_start, more)`` when ``more`` is not empty."""

    __slots__ = ()

    def fetch_more(self, key: Any, time_from: int, more: tuple[Any, ...],
                   backward: bool = False) -> Iterator[tuple[Any, Any]]:
        if len(more) == 1:
            read = self.backward_fetch_range if backward else self.fetch_range  # type: ignore[attr-defined]
            return read(key, time_from, more[0])
        if len(more) == 2:
            read = self.backward_fetch_key_range if backward else self.fetch_key_range  # type: ignore[attr-defined]
            return read(key, time_from, *more)
        name = "backward_fetch" if backward else "fetch"
        raise TypeError(f"{name} takes (key, time_from, time_to) or (key_from, key_to, time_from, time_to)"
                         + ("" if backward else " or (key, window_start)")
                         + f"; got {2 + len(more)} arguments.")

    def backward_fetch(self, key: Any, time_from: int, *more: Any) -> Iterator[tuple[Any, Any]]:
        """Kafka's backwardFetch: (key, time_from, time_to) or (key_from, key_to, time_from, time_to),
        newest window first."""
        return self.fetch_more(key, time_from, more, backward=True)
