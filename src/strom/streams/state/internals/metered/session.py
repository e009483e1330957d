"""The typed session store: one aggregate per key and session window."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strom.streams.kstream.windows import SessionWindow, Windowed
from strom.streams.state.context import FlushListener
from strom.streams.state.internals.metered.windowed import MeteredWindowed, WindowedRecords
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP


class MeteredSessionStore(MeteredWindowed):
    """Kafka's SessionStore: one aggregate per key and session window."""

    def put(self, session: Windowed[Any], aggregate: Any) -> None:
        """Store the aggregate of a session; None removes the session."""
        self.num_puts += 1
        value = None if aggregate is None else self._value_ser(self._topic, aggregate)
        self.wrapped.put(self._key_bytes(session.key), session.window.start, session.window.end, value)

    def remove(self, session: Windowed[Any]) -> None:
        self.put(session, None)

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        self.num_fetches += 1
        data = self.wrapped.fetch_session(self._key_bytes(key), session_start, session_end)
        return None if data is None else self._value_de(self._topic, data)

    def find_sessions(self, key: Any, earliest_session_end: int,
                      latest_session_start: int) -> WindowedRecords:
        """Sessions of ``key`` ending at or after ``earliest_session_end`` and starting at or before
        ``latest_session_start``: those a record could merge with."""
        raw = self._key_bytes(key)
        return self._sessions(self.wrapped.find_sessions(raw, raw, earliest_session_end,
                                                         latest_session_start))

    def backward_find_sessions(self, key: Any, earliest_session_end: int,
                               latest_session_start: int) -> WindowedRecords:
        raw = self._key_bytes(key)
        return self._sessions(self.wrapped.find_sessions(raw, raw, earliest_session_end, latest_session_start,
                                                         True))

    def find_sessions_key_range(self, key_from: Any, key_to: Any, earliest_session_end: int,
                                latest_session_start: int) -> WindowedRecords:
        low = None if key_from is None else self._key_bytes(key_from)
        high = None if key_to is None else self._key_bytes(key_to)
        return self._sessions(self.wrapped.find_sessions(low, high, earliest_session_end,
                                                         latest_session_start))

    def fetch(self, key: Any) -> WindowedRecords:
        """Every session of ``key``."""
        return self.find_sessions(key, 0, MAX_TIMESTAMP)

    def backward_fetch(self, key: Any) -> WindowedRecords:
        return self.backward_find_sessions(key, 0, MAX_TIMESTAMP)

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool) -> bool:
        """With caching, flushed sessions reach ``listener(Windowed key, new, old, timestamp)`` (the
        timestamp is the session end); returns False when the store is not cached."""
        set_listener = getattr(self.wrapped, "set_flush_listener", None)
        if set_listener is None:
            return False

        def on_flush(key: bytes, start: int, end: int, new: bytes | None, old: bytes | None) -> None:
            window = Windowed(self._key_de(self._topic, key), SessionWindow(start, end))
            listener(window, self._value_or_none(new), self._value_or_none(old), end)

        return set_listener(on_flush, send_old_values)

    def _value_or_none(self, data: bytes | None) -> Any:
        return None if data is None else self._value_de(self._topic, data)

    def _sessions(self, records: Iterator[tuple[bytes, int, int, bytes]]) -> WindowedRecords:
        self.num_fetches += 1
        for key, start, end, value in records:
            yield Windowed(self._key_de(self._topic, key), SessionWindow(start, end)), \
                self._value_de(self._topic, value)
