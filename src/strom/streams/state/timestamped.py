"""ValueAndTimestamp and its serde: Kafka's layout, an 8-byte big-endian timestamp then the value bytes."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from strom.errors import SerializationError
from strom.kafka.serdes import (
    DoubleSerde,
    FloatSerde,
    IntegerSerde,
    LongSerde,
    ShortSerde,
    decoder_of,
    encoder_of,
)
from strom.streams.state.internals.timestamps import (
    TIMESTAMP_SIZE,
    pack_timestamp,
    split_timestamped,
    unpack_timestamp,
    with_timestamp,
)

__all__ = ["ValueAndTimestamp", "ValueAndTimestampSerde"]

V = TypeVar("V")
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
        self._value_serializer = value_serde.serializer()
        self._value_deserializer = value_serde.deserializer()
        self._serialize_value = self._value_serializer.serialize
        self._deserialize_value = self._value_deserializer.deserialize
        self._fixed_width = _FIXED_WIDTH.get(type(value_serde))

    def encoder(self, topic: str | None) -> Callable[[ValueAndTimestamp[Any]], bytes]:
        """``serialize`` as a one-argument function (``encoder_of``'s contract): it raises for anything
        but a ValueAndTimestamp with a value the plain value serde takes."""
        if self._fixed_width is not None:
            return _fixed_width_encoder(*self._fixed_width)
        value_encode = encoder_of(self._value_serializer, topic)

        def encode(data: ValueAndTimestamp[Any]) -> bytes:
            if type(data) is not ValueAndTimestamp or data[0] is None:
                raise TypeError("not a ValueAndTimestamp with a value")
            return pack_timestamp(data[1]) + value_encode(data[0])  # with_timestamp, one call less

        return encode

    def decoder(self, topic: str | None) -> Callable[[bytes], ValueAndTimestamp[Any]]:
        """``deserialize`` as a one-argument function (``decoder_of``'s contract)."""
        if self._fixed_width is not None:
            return _fixed_width_decoder(self._fixed_width[0])
        value_decode = decoder_of(self._value_deserializer, topic)

        def decode(data: bytes) -> ValueAndTimestamp[Any]:
            # split_timestamped, one call less: this runs on every read of a timestamped store
            return _new_tuple(ValueAndTimestamp, (value_decode(data[TIMESTAMP_SIZE:]),
                                                  unpack_timestamp(data)[0]))

        return decode

    def pair_codec(self, topic: str | None) -> tuple[Callable[[bytes], tuple[int, Any]],
                                                    Callable[[int, Any], bytes] | None, tuple[type, ...]]:
        """``(unpack, pack, kinds)``: ``unpack(data)`` gives ``(timestamp, value)``, ``pack(timestamp,
        value)`` the bytes, for a value whose type is one of ``kinds`` (a fixed-width number: both are
        one struct call, as the encoder and decoder make them). Otherwise ``kinds`` is empty and
        ``pack`` None; ``unpack`` goes through the decoder. Both raise as ``encoder_of``'s
        contract says: the serde's full methods decide then."""
        if self._fixed_width is not None:
            both, kinds = self._fixed_width
            return both.unpack, both.pack, kinds
        decode = self.decoder(topic)

        def unpack(data: bytes) -> tuple[int, Any]:
            value, timestamp = decode(data)
            return timestamp, value

        return unpack, None, ()

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
        return with_timestamp(timestamp, raw)

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None
                    ) -> ValueAndTimestamp[Any] | None:
        if data is None:
            return None
        if len(data) < TIMESTAMP_SIZE:
            raise SerializationError(f"Timestamped value from {topic!r} has {len(data)} bytes, fewer than "
                                     "the 8-byte timestamp prefix; the store was not written as timestamped.")
        timestamp, plain = split_timestamped(data)
        return _new_tuple(ValueAndTimestamp, (self._deserialize_value(topic, plain, headers), timestamp))


_FIXED_WIDTH: dict[type, tuple[struct.Struct, tuple[type, ...]]] = {
    serde: (struct.Struct(">q" + serde.fmt[1:]), (int, serde.kind))
    for serde in (ShortSerde, IntegerSerde, LongSerde, FloatSerde, DoubleSerde)
}
"""A fixed-width number after the timestamp: one struct call packs or unpacks both, no slicing. The
types are the ones the serde's own fast path takes; it words the error for anything else."""


def _fixed_width_encoder(both: struct.Struct, kinds: tuple[type, ...]) -> Callable[[Any], bytes]:
    pack = both.pack

    def encode(data: ValueAndTimestamp[Any]) -> bytes:
        if type(data) is not ValueAndTimestamp or type(data[0]) not in kinds:
            raise TypeError("not a ValueAndTimestamp with a number of the serde's type")
        return pack(data[1], data[0])

    return encode


def _fixed_width_decoder(both: struct.Struct) -> Callable[[bytes], ValueAndTimestamp[Any]]:
    unpack = both.unpack

    def decode(data: bytes) -> ValueAndTimestamp[Any]:
        timestamp, value = unpack(data)
        return _new_tuple(ValueAndTimestamp, (value, timestamp))

    return decode
