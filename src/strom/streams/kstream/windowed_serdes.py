"""Serdes for windowed keys in Kafka's wire formats (``WindowedSerdes`` in Kafka Streams).

Time-windowed keys travel as ``key bytes + 8-byte window start``; the window end is not written,
so the deserializer needs the window size (as Kafka's ``TimeWindowedDeserializer``). Session-windowed
keys travel as ``key bytes + 8-byte end + 8-byte start``.
"""

from __future__ import annotations

from typing import Any

from strom.kafka.serdes import BaseSerde, Serde
from strom.streams.kstream.windows import MAX_TIMESTAMP, SessionWindow, Window, Windowed
from strom.streams.state.window import schemas

__all__ = [
    "SessionWindowedSerde",
    "TimeWindowedSerde",
    "WindowedSerdes",
]


class _WindowedSerde(BaseSerde[Windowed[Any]]):
    """``inner`` None stands for ``default.key.serde``: the task fills it in (``with_default``)."""

    def __init__(self, inner: Serde[Any] | None) -> None:
        self.inner = inner
        if inner is not None:
            self._inner_serializer = inner.serializer()
            self._inner_deserializer = inner.deserializer()


class TimeWindowedSerde(_WindowedSerde):
    """Serde of ``Windowed(key, Window(start, start + size))`` keys."""

    name = "TimeWindowedSerde"

    def __init__(self, inner: Serde[Any] | None, window_size_ms: int) -> None:
        super().__init__(inner)
        self.window_size_ms = window_size_ms

    def with_default(self, default: Serde[Any]) -> TimeWindowedSerde:
        return TimeWindowedSerde(self.inner or default, self.window_size_ms)

    def serialize(self, topic: str | None, data: Windowed[Any] | None, headers: Any = None) -> bytes | None:
        if data is None:
            return None
        key = self._inner_serializer.serialize(topic, data.key, headers)
        return schemas.time_windowed_key(key or b"", data.window.start)

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> Windowed[Any] | None:
        if data is None:
            return None
        key, start = schemas.split_time_windowed_key(data)
        end = min(start + self.window_size_ms, MAX_TIMESTAMP)
        return Windowed(self._inner_deserializer.deserialize(topic, key, headers), Window(start, end))


class SessionWindowedSerde(_WindowedSerde):
    """Serde of ``Windowed(key, SessionWindow(start, end))`` keys."""

    name = "SessionWindowedSerde"

    def with_default(self, default: Serde[Any]) -> SessionWindowedSerde:
        return SessionWindowedSerde(self.inner or default)

    def serialize(self, topic: str | None, data: Windowed[Any] | None, headers: Any = None) -> bytes | None:
        if data is None:
            return None
        key = self._inner_serializer.serialize(topic, data.key, headers)
        return schemas.session_store_key(key or b"", data.window.start, data.window.end)

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> Windowed[Any] | None:
        if data is None:
            return None
        key, start, end = schemas.split_session_store_key(data)
        return Windowed(self._inner_deserializer.deserialize(topic, key, headers), SessionWindow(start, end))


class WindowedSerdes:
    """Factories named as Kafka's ``WindowedSerdes``."""

    @staticmethod
    def time_windowed_serde_from(inner: Serde[Any], window_size_ms: int) -> TimeWindowedSerde:
        return TimeWindowedSerde(inner, window_size_ms)

    @staticmethod
    def session_windowed_serde_from(inner: Serde[Any]) -> SessionWindowedSerde:
        return SessionWindowedSerde(inner)
