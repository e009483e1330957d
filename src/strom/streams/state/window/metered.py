"""The metered (outermost) layers of window and session stores: serdes and operation counts.

Processors and interactive queries use these typed stores; everything below works on bytes.
Timestamped window stores (what windowed aggregations use) hold ``ValueAndTimestamp`` values,
stored as Kafka does: an 8-byte timestamp followed by the serialized value.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strom.kafka.serdes import Serde
from strom.streams.kstream.windows import SessionWindow, Window, Windowed
from strom.streams.state.context import FlushListener
from strom.streams.state.internals.metered import MeteredStore
from strom.streams.state.internals.timestamps import (
    MAX_TIMESTAMP,
    TIMESTAMP_SIZE,
    split_timestamped,
    with_timestamp,
)
from strom.streams.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde

_new_tuple = tuple.__new__  # a ValueAndTimestamp without the NamedTuple's Python-level __new__ (hot path)

WindowedRecords = Iterator[tuple[Windowed[Any], Any]]


class _Metered(MeteredStore):
    def __init__(self, wrapped: Any, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> None:
        super().__init__(wrapped, key_serde, value_serde, "")
        self._last_key: Any = None
        self._last_key_bytes = b""
        self.num_puts = 0
        self.num_fetches = 0

    @property
    def observed_stream_time(self) -> int:
        """The largest record time the store has seen (window start; session end), kept across
        restarts and restores: processors recreated for a new run resume their stream time from it."""
        return self.wrapped.observed_stream_time

    def _key_bytes(self, key: Any) -> bytes:
        # an aggregation fetches then puts the same key: serialize it once
        if key is self._last_key:
            return self._last_key_bytes
        if key is None:
            raise ValueError(f"store {self.name!r}: keys must not be None")
        try:
            key_bytes = self._key_encode(key)
        except Exception:
            key_bytes = self._key_ser(self._topic, key)
        self._last_key_bytes, self._last_key = key_bytes, key
        return key_bytes


class MeteredWindowStore(_Metered):
    """Kafka's WindowStore: values per key and window start."""

    timestamped = False

    def __init__(self, wrapped: Any, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 window_size_ms: int) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self.window_size_ms = window_size_ms

    def _to_bytes(self, value: Any) -> bytes | None:
        return None if value is None else self._value_ser(self._topic, value)

    def _from_bytes(self, data: bytes | None) -> Any:
        return None if data is None else self._value_de(self._topic, data)

    def _plain(self, data: bytes | None) -> Any:
        """What the flush listener gets: the plain value."""
        return self._from_bytes(data)

    def _windowed(self, key: bytes, start: int) -> Windowed[Any]:
        try:
            typed = self._key_decode(key)
        except Exception:
            typed = self._key_de(self._topic, key)  # the serde's error
        return Windowed(typed, Window(start, min(start + self.window_size_ms, MAX_TIMESTAMP)))

    def put(self, key: Any, value: Any, window_start: int) -> None:
        """Store ``value`` for a window; None deletes."""
        self.num_puts += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        self.wrapped.put(key_bytes, self._to_bytes(value), window_start)

    def fetch(self, key: Any, window_start: int) -> Any:
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

        def on_flush(key: bytes, start: int, new: bytes | None, old: bytes | None, timestamp: int) -> None:
            listener(self._windowed(key, start), plain(new), None if old is None else plain(old), timestamp)

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


class MeteredTimestampedWindowStore(MeteredWindowStore):
    """Values are ValueAndTimestamp (what windowed aggregations keep), stored as Kafka does: an 8-byte
    timestamp, then the value bytes. fetch and put, once per record of an aggregation, use the bound
    encoder and decoder (one struct call for numbers); the serde reports values of the wrong type or
    layout."""

    timestamped = True

    def _wrap_value_serde(self, value_serde: Serde[Any]) -> Any:
        self._plain_to = value_serde.serializer().serialize
        self._plain_from = value_serde.deserializer().deserialize
        return ValueAndTimestampSerde(value_serde)

    def _to_bytes(self, value: Any) -> bytes | None:
        if type(value) is ValueAndTimestamp:
            return with_timestamp(value[1], self._plain_to(self._topic, value[0]))
        return self._value_ser(self._topic, value)  # None, or the serde's error

    def _from_bytes(self, data: bytes | None) -> Any:
        if data is not None and len(data) >= TIMESTAMP_SIZE:
            timestamp, plain = split_timestamped(data)
            return _new_tuple(ValueAndTimestamp, (self._plain_from(self._topic, plain), timestamp))
        return self._value_de(self._topic, data)  # None, or the serde's error

    def _plain(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self._value_decode(data)[0]
        except Exception:
            return self._from_bytes(data)[0]  # the serde's error

    def put(self, key: Any, value: Any, window_start: int) -> None:
        """Store a ValueAndTimestamp for a window; None deletes."""
        self.num_puts += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        try:
            data = self._value_encode(value)
        except Exception:
            data = self._to_bytes(value)  # None, or the serde's error
        self.wrapped.put(key_bytes, data, window_start)

    def fetch(self, key: Any, window_start: int) -> Any:
        self.num_fetches += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        data = self.wrapped.fetch(key_bytes, window_start)
        if data is None:
            return None
        try:
            return self._value_decode(data)
        except Exception:
            return self._from_bytes(data)  # the serde's error


class MeteredSessionStore(_Metered):
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
