"""Serializers and deserializers with Kafka's wire formats, shared by strom.streams and strom.tasks.

Numbers are big-endian fixed width exactly as Kafka's ``IntegerSerializer``/``LongSerializer``/
``DoubleSerializer`` write them, so topics interoperate with Java applications. ``None`` maps to
``None`` both ways (Kafka's null), which is how tombstones travel. A serde is both its own serializer
and deserializer, which keeps the per-record path to one method call.
"""

from __future__ import annotations

import codecs
import io
import json
import struct
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import fastavro

from strom.errors import ConfigError, SerializationError

__all__ = [
    "AvroSerde", "BaseSerde", "BooleanSerde", "ByteArraySerde", "Deserializer", "DoubleSerde", "FloatSerde",
    "FunctionSerde", "IntegerSerde", "JsonSerde", "LongSerde", "Serde", "Serdes", "Serializer",
    "ShortSerde", "StringSerde", "UUIDSerde", "decoder_of", "encoder_of", "packer_of",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


@runtime_checkable
class Serializer(Protocol[T_contra]):
    def serialize(self, topic: str | None, data: T_contra | None, headers: Any = None) -> bytes | None: ...


@runtime_checkable
class Deserializer(Protocol[T_co]):
    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> T_co | None: ...


@runtime_checkable
class Serde(Protocol[T]):
    def serializer(self) -> Serializer[T]: ...

    def deserializer(self) -> Deserializer[T]: ...


class BaseSerde(Generic[T]):
    """A serde implemented by two functions; subclasses give ``_to_bytes`` and ``_from_bytes``."""

    name = "Serde"

    def serializer(self) -> BaseSerde[T]:
        return self

    def deserializer(self) -> BaseSerde[T]:
        return self

    def encoder(self, topic: str | None) -> Callable[[T], bytes | None]:
        """``serialize(topic, data)`` as a one-argument function, bound once by per-record paths (see
        ``encoder_of``)."""
        return partial(self.serialize, topic)

    def decoder(self, topic: str | None) -> Callable[[bytes], T | None]:
        """``deserialize(topic, data)`` as a one-argument function (see ``decoder_of``)."""
        return partial(self.deserialize, topic)

    def serialize(self, topic: str | None, data: T | None, headers: Any = None) -> bytes | None:
        if data is None:
            return None
        try:
            return self._to_bytes(data)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"{self.name} cannot serialize {type(data).__name__} value {_preview(data)} for topic "
                f"{topic!r}: {exc}. Configure a serde that matches the value's type.") from exc

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> T | None:
        if data is None:
            return None
        try:
            return self._from_bytes(data)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"{self.name} cannot deserialize {len(data)} bytes {_preview(bytes(data))} from topic "
                f"{topic!r}: {exc}. Check that the topic was written with a matching serde, or set "
                "default.deserialization.exception.handler to skip bad records.") from exc

    def _to_bytes(self, data: T) -> bytes:
        raise NotImplementedError

    def _from_bytes(self, data: bytes) -> T:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"Serdes.{self.name}()"


def encoder_of(serializer: Serializer[Any], topic: str | None) -> Callable[[Any], bytes | None]:
    """A one-argument function serializing non-None values for ``topic``, to bind once where every
    record is serialized. It may be a C function (``str.encode``) that raises for input ``serialize``
    handles or reports (a non-str, a bytearray): on any exception call ``serialize`` itself."""
    own = getattr(serializer, "encoder", None)
    return own(topic) if own is not None else partial(serializer.serialize, topic)


def packer_of(serializer: Serializer[Any]) -> tuple[tuple[type, ...], Callable[[Any], bytes]] | None:
    """``(kinds, pack)`` when ``serialize`` of a value whose type is one of ``kinds`` is ``pack(value)``,
    one C call a per-record path may inline (a fixed-width number's struct); ``pack`` raises where
    ``serialize`` decides otherwise (a number out of range). None for other serializers."""
    own = getattr(serializer, "packer", None)
    return None if own is None else own()


def decoder_of(deserializer: Deserializer[Any], topic: str | None) -> Callable[[bytes], Any]:
    """The deserializing counterpart of ``encoder_of``, with the same contract."""
    own = getattr(deserializer, "decoder", None)
    return own(topic) if own is not None else partial(deserializer.deserialize, topic)


def _preview(data: object, limit: int = 40) -> str:
    text = repr(data)
    return text if len(text) <= limit else text[:limit] + "..."


class ByteArraySerde(BaseSerde[bytes]):
    name = "ByteArray"

    def serialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> bytes | None:
        if data is None or type(data) is bytes:
            return data
        if isinstance(data, bytearray | memoryview):
            return bytes(data)
        raise SerializationError(f"ByteArray serde needs bytes for topic {topic!r}, got "
                                 f"{type(data).__name__} {_preview(data)}. Serialize the value first "
                                 "or configure a serde for its type.")

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> bytes | None:
        return data


class StringSerde(BaseSerde[str]):
    name = "String"

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding
        self._utf8 = codecs.lookup(encoding).name == "utf-8"

    def encoder(self, topic: str | None) -> Callable[[str], bytes | None]:
        """UTF-8 strings encode with ``str.encode`` itself: no Python frame per record (unless a
        subclass changed ``serialize``)."""
        own = self._utf8 and type(self).serialize is StringSerde.serialize
        return str.encode if own else super().encoder(topic)

    def decoder(self, topic: str | None) -> Callable[[bytes], str | None]:
        own = self._utf8 and type(self).deserialize is StringSerde.deserialize
        return bytes.decode if own else super().decoder(topic)

    def serialize(self, topic: str | None, data: str | None, headers: Any = None) -> bytes | None:
        if type(data) is str:  # the per-record fast path; the base class reports errors
            try:
                return data.encode(self.encoding)
            except UnicodeError:
                pass
        return super().serialize(topic, data, headers)

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> str | None:
        if type(data) is bytes:
            try:
                return data.decode(self.encoding)
            except UnicodeError:
                pass
        return super().deserialize(topic, data, headers)

    def _to_bytes(self, data: str) -> bytes:
        if not isinstance(data, str):
            raise TypeError("expected str")
        return data.encode(self.encoding)

    def _from_bytes(self, data: bytes) -> str:
        return bytes(data).decode(self.encoding)


class _FixedWidthSerde(BaseSerde[T]):
    """A number in a fixed number of big-endian bytes, as Kafka's number serializers write it."""

    fmt = ">i"
    kind: type = int

    def __init__(self) -> None:
        self._struct = struct.Struct(self.fmt)
        self._size = self._struct.size
        self._pack = self._struct.pack
        self._unpack = self._struct.unpack

    def __reduce__(self) -> tuple:
        """Pickles as its class (struct.Struct cannot be pickled): Spark ships serdes to executors."""
        return (type(self), ())

    def serialize(self, topic: str | None, data: T | None, headers: Any = None) -> bytes | None:
        kind = type(data)
        if kind is int or kind is self.kind:  # the per-record fast path; the base class reports errors
            try:
                return self._pack(data)
            except struct.error:
                pass
        return super().serialize(topic, data, headers)

    def packer(self) -> tuple[tuple[type, ...], Callable[[Any], bytes]] | None:
        """``serialize``'s fast path as ``packer_of`` describes it (None if a subclass changed it)."""
        if type(self).serialize is not _FixedWidthSerde.serialize:
            return None
        return (int, self.kind), self._pack

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> T | None:
        if data is not None and len(data) == self._size:
            return self._unpack(data)[0]
        return super().deserialize(topic, data, headers)

    def _to_bytes(self, data: T) -> bytes:
        if isinstance(data, bool) or not isinstance(data, self.kind | int):
            raise TypeError(f"expected {self.kind.__name__}")
        return self._struct.pack(data)

    def _from_bytes(self, data: bytes) -> T:
        if len(data) != self._struct.size:
            raise ValueError(f"size of data must be {self._struct.size} bytes")
        return self._struct.unpack(data)[0]


class ShortSerde(_FixedWidthSerde[int]):
    name, fmt = "Short", ">h"


class IntegerSerde(_FixedWidthSerde[int]):
    name, fmt = "Integer", ">i"


class LongSerde(_FixedWidthSerde[int]):
    name, fmt = "Long", ">q"


class FloatSerde(_FixedWidthSerde[float]):
    name, fmt, kind = "Float", ">f", float


class DoubleSerde(_FixedWidthSerde[float]):
    name, fmt, kind = "Double", ">d", float


class BooleanSerde(BaseSerde[bool]):
    """One byte, 1 or 0, as Kafka's BooleanSerializer."""

    name = "Boolean"

    def _to_bytes(self, data: bool) -> bytes:
        if not isinstance(data, bool):
            raise TypeError("expected bool")
        return b"\x01" if data else b"\x00"

    def _from_bytes(self, data: bytes) -> bool:
        if len(data) != 1 or data[0] > 1:
            raise ValueError("expected one byte, 0 or 1")
        return data[0] == 1


class UUIDSerde(BaseSerde[uuid.UUID]):
    """The UUID's canonical string, as Kafka's UUIDSerializer."""

    name = "UUID"

    def _to_bytes(self, data: uuid.UUID) -> bytes:
        if not isinstance(data, uuid.UUID):
            raise TypeError("expected uuid.UUID")
        return str(data).encode()

    def _from_bytes(self, data: bytes) -> uuid.UUID:
        return uuid.UUID(bytes(data).decode())


class JsonSerde(BaseSerde[Any]):
    """UTF-8 JSON of any JSON-compatible value, compact and with sorted keys so equal values give equal
    bytes (store keys and compaction rely on that)."""

    name = "Json"

    def _to_bytes(self, data: Any) -> bytes:
        return json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()

    def _from_bytes(self, data: bytes) -> Any:
        return json.loads(bytes(data))


class AvroSerde(BaseSerde[Any]):
    """Avro binary encoding of one record with a fixed schema (no schema-registry framing).

    ``reader_schema`` lets a consumer read data written with an older or newer writer schema.
    """

    name = "Avro"

    def __init__(self, schema: Mapping[str, Any] | str, reader_schema: Mapping[str, Any] | str | None = None
                 ) -> None:
        self.schema = _parse_avro(schema)
        self.reader_schema = _parse_avro(reader_schema) if reader_schema is not None else None

    def _to_bytes(self, data: Any) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.schema, data)
        return out.getvalue()

    def _from_bytes(self, data: bytes) -> Any:
        buf = io.BytesIO(data)
        value = fastavro.schemaless_reader(buf, self.schema, self.reader_schema)
        if buf.tell() != len(data):
            raise ValueError(f"{len(data) - buf.tell()} trailing bytes after the Avro datum")
        return value

    def __repr__(self) -> str:
        return f"Serdes.Avro({self.schema.get('name', 'schema')!r})"


def _parse_avro(schema: Mapping[str, Any] | str) -> Any:
    try:
        raw = json.loads(schema) if isinstance(schema, str) else dict(schema)
        return fastavro.parse_schema(raw)
    except Exception as exc:
        raise ConfigError(f"Invalid Avro schema: {exc}. Pass the schema as a dict or a JSON string "
                          "(see the Avro specification).") from exc


class FunctionSerde(BaseSerde[T]):
    """A serde from a pair of plain functions (Kafka's ``Serdes.serdeFrom(serializer, deserializer)``)."""

    name = "serde_from"

    def __init__(self, to_bytes: Callable[[T], bytes], from_bytes: Callable[[bytes], T]) -> None:
        self._to = to_bytes
        self._from = from_bytes

    def _to_bytes(self, data: T) -> bytes:
        return self._to(data)

    def _from_bytes(self, data: bytes) -> T:
        return self._from(data)


_BY_NAME: dict[str, Callable[[], BaseSerde[Any]]] = {
    "bytearray": ByteArraySerde, "bytes": ByteArraySerde, "string": StringSerde, "short": ShortSerde,
    "integer": IntegerSerde, "long": LongSerde, "float": FloatSerde, "double": DoubleSerde,
    "boolean": BooleanSerde, "uuid": UUIDSerde, "json": JsonSerde,
}


class Serdes:
    """Factories named as Kafka's ``Serdes``: ``Serdes.String()``, ``Serdes.Long()``, ..."""

    ByteArray = staticmethod(ByteArraySerde)
    Bytes = staticmethod(ByteArraySerde)
    String = staticmethod(StringSerde)
    Short = staticmethod(ShortSerde)
    Integer = staticmethod(IntegerSerde)
    Long = staticmethod(LongSerde)
    Float = staticmethod(FloatSerde)
    Double = staticmethod(DoubleSerde)
    Boolean = staticmethod(BooleanSerde)
    UUID = staticmethod(UUIDSerde)
    Json = staticmethod(JsonSerde)
    Avro = staticmethod(AvroSerde)

    @staticmethod
    def serde_from(to_bytes: Callable[[Any], bytes],
                   from_bytes: Callable[[bytes], Any]) -> FunctionSerde[Any]:
        return FunctionSerde(to_bytes, from_bytes)

    @staticmethod
    def from_config(key: str, value: object) -> Serde[Any]:
        """Resolve ``default.key.serde``/``default.value.serde``: a serde, a serde class, or a name.

        Names are Kafka's class names (``org.apache.kafka.common.serialization.Serdes$StringSerde``)
        or the short form (``String``, ``Long``, ``Json``...).
        """
        if isinstance(value, Serde) and not isinstance(value, type):
            return value
        if isinstance(value, type):
            return value()
        if isinstance(value, str):
            short = value.rsplit("$", 1)[-1].rsplit(".", 1)[-1].lower().removesuffix("serde")
            if short in _BY_NAME:
                return _BY_NAME[short]()
        raise ConfigError.bad_value(key, value, "a Serde, a Serde class or one of the names "
                                    + ", ".join(sorted(_BY_NAME)))
