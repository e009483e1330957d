"""ValueAndTimestamp and its serde: Kafka's layout, an 8-byte big-endian timestamp then the value bytes."""

from __future__ import annotations

import struct
from typing import Any, Generic, NamedTuple, TypeVar

from strom.errors import SerializationError

V = TypeVar("V")
_TIMESTAMP = struct.Struct(">q")
_pack_timestamp = _TIMESTAMP.pack
_unpack_timestamp = _TIMESTAMP.unpack_from
_new_tuple = tuple.__new__  # builds a ValueAndTimestamp without the NamedTuple's Python-level __new__


class ValueAndTimestamp(NamedTuple, Generic[V]):
    """A stored value with the timestamp of the record that produced it (timestamped stores, KTables)."""

    value: V
    timestamp: int

    @staticmethod
    def make(value: V | None, timestamp: int) -> ValueAndTimestamp[V] | None:
        """None for a None value, as Kafka's ``ValueAndTimestamp.make``: a deleted key has no timestamp."""
        return None if value is None else ValueAndTimestamp(value, timestamp)

    @staticmethod
    def get_value_or_null(value_and_timestamp: ValueAndTimestamp[V] | None) -> V | None:
        return None if value_and_timestamp is None else value_and_timestamp.value


class ValueAndTimestampSerde:
    """Wraps a value serde; serializer and deserializer in one, like the serdes of strom.kafka.serdes."""

    def __init__(self, value_serde: Any) -> None:
        self._serialize_value = value_serde.serializer().serialize
        self._deserialize_value = value_serde.deserializer().deserialize

    def serializer(self) -> ValueAndTimestampSerde:
        return self

    def deserializer(self) -> ValueAndTimestampSerde:
        return self

    def serialize(self, topic: str | None, data: ValueAndTimestamp[Any] | None, headers: Any = None
                  ) -> bytes | None:
        if type(data) is not ValueAndTimestamp:
            if data is None:
                return None
            if not isinstance(data, ValueAndTimestamp):
                raise SerializationError(
                    f"A timestamped store needs ValueAndTimestamp values, got {type(data).__name__}; "
                    "wrap it: ValueAndTimestamp.make(value, ts).")
        value, timestamp = data
        raw = self._serialize_value(topic, value, headers)
        if raw is None:
            return None
        return _pack_timestamp(timestamp) + raw

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None
                    ) -> ValueAndTimestamp[Any] | None:
        if data is None:
            return None
        if len(data) < 8:
            raise SerializationError(f"Timestamped value from {topic!r} has {len(data)} bytes, fewer than "
                                     "the 8-byte timestamp prefix; the store was not written as timestamped.")
        return _new_tuple(ValueAndTimestamp, (self._deserialize_value(topic, data[8:], headers),
                                              _unpack_timestamp(data)[0]))
