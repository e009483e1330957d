"""The typed window store: values per key and window start."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strom.kafka.serdes import Serde
from strom.streams.kstream.windows import Window, Windowed, new_windowed
from strom.streams.state.context import FlushListener
from strom.streams.state.internals.metered.windowed import MeteredWindowed, WindowedRecords
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP
from strom.streams.state.window.reads import WindowFetches


class MeteredWindowStore(WindowFetches, MeteredWindowed):
    """Kafka's WindowStore: values per key and window start."""

    timestamped = False

    def __init__(self, wrapped: Any, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 window_size_ms: int) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self.window_size_ms = window_size_ms
        self._last_window: Window | None = None

    def _to_bytes(self, value: Any) -> bytes | None:
        return None if value is None else self._value_ser(self._topic, value)

    def _from_bytes(self, data: bytes | None) -> Any:
        return None if data is None else self._value_de(self._topic, data)

    def _plain(self, data: bytes | None) -> Any:
        """What the flush listener gets: the plain value."""
        return self._from_bytes(data)

    def _flushed_timestamp(self, data: bytes | None, timestamp: int) -> int:
        """The timestamp a flushed window goes downstream with: its last writer's."""
        return timestamp

    def _windowed(self, key: bytes, start: int) -> Windowed[Any]:
        try:
            typed = self._key_decode(key)
        except Exception:
            typed = self._key_de(self._topic, key)  # the serde's error
        window = self._last_window  # entries flush window by window: one (immutable) Window for each
        if window is None or window.start != start:
            window = self._last_window = Window(start, min(start + self.window_size_ms, MAX_TIMESTAMP))
        return new_windowed(typed, window)

    def put(self, key: Any, value: Any, window_start: int) -> None:
        """Store ``value`` for a window; None deletes."""
        self.num_puts += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        self.wrapped.put(key_bytes, self._to_bytes(value), window_start)

    def fetch(self, key: Any, window_start: int, *more: Any) -> Any:
        """The key's value in the window starting at ``window_start``; with more arguments Kafka's range
        forms (state/window/reads.py)."""
        if more:
            return self.fetch_more(key, window_start, more)
        self.num_fetches += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        return self._from_bytes(self.wrapped.fetch(key_bytes, window_start))

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """(window start, value) of the key's windows starting in [time_from, time_to], oldest first."""
        return self._values(self.wrapped.fetch_range(self._key_bytes(key), time_from, time_to, False))

    def backward_fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        return self._values(self.wrapped.fetch_range(self._key_bytes(key), time_from, time_to, True))

    def fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                        time_to: int) -> WindowedRecords:
        """(Windowed key, value) for keys in [key_from, key_to] (None: unbounded)."""
        return self._windows(self.wrapped.fetch_key_range(self._bound(key_from), self._bound(key_to),
                                                          time_from, time_to, False))

    def backward_fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                                 time_to: int) -> WindowedRecords:
        return self._windows(self.wrapped.fetch_key_range(self._bound(key_from), self._bound(key_to),
                                                          time_from, time_to, True))

    def fetch_all(self, time_from: int, time_to: int) -> WindowedRecords:
        return self._windows(self.wrapped.fetch_key_range(None, None, time_from, time_to, False))

    def all(self) -> WindowedRecords:
        return self._windows(self.wrapped.all(False))

    def backward_all(self) -> WindowedRecords:
        return self._windows(self.wrapped.all(True))

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool) -> bool:
        """With caching, flushed windows reach ``listener(Windowed key, new, old, timestamp)`` with plain
        values; returns False when the store is not cached (the processor forwards itself)."""
        set_listener = getattr(self.wrapped, "set_flush_listener", None)
        if set_listener is None:
            return False

        plain = self._plain

        stamp = self._flushed_timestamp

        def on_flush(key: bytes, start: int, new: bytes | None, old: bytes | None, timestamp: int) -> None:
            listener(self._windowed(key, start), plain(new), None if old is None else plain(old),
                     stamp(new, timestamp))

        return set_listener(on_flush, send_old_values)

    def _bound(self, key: Any) -> bytes | None:
        return None if key is None else self._key_bytes(key)

    def _values(self, records: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, Any]]:
        self.num_fetches += 1
        for start, value in records:
            yield start, self._from_bytes(value)

    def _windows(self, records: Iterator[tuple[bytes, int, bytes]]) -> WindowedRecords:
        self.num_fetches += 1
        for key, start, value in records:
            yield self._windowed(key, start), self._from_bytes(value)
