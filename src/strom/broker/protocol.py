"""Kafka wire framing on top of kio: parse a request frame, encode a response frame.

Handlers answer with plain dicts named after kio's fields; `build` turns such a dict into the kio
entity of the negotiated version, filling fields the version lacks or the handler left out with
the field's default (or a zero value). One handler thus serves every version of its API.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type

from strom.broker.log.segment import FileRange

_API_KEY_VERSION = struct.Struct(">hh")
_INT32 = struct.Struct(">i")
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


class MalformedRequest(Exception):
    """The frame cannot be parsed: the connection that sent it is closed."""


Part = bytes | FileRange


@dataclasses.dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A complete response frame (size prefix included) as bytes and file ranges, in order."""

    parts: list[Part]

    def to_bytes(self) -> bytes:
        return b"".join(p.read() if isinstance(p, FileRange) else p for p in self.parts)


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek_api(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api_key, api_version and correlation id of a request frame (without the size prefix)."""
    if len(frame) < 8:
        raise MalformedRequest(f"request frame of {len(frame)} bytes is shorter than a header")
    api_key, api_version = _API_KEY_VERSION.unpack_from(frame, 0)
    return api_key, api_version, _INT32.unpack_from(frame, 4)[0]


def parse_request(frame: bytes | memoryview) -> Request:
    api_key, api_version, _ = peek_api(frame)
    try:
        schema = load_request_schema(api_key, api_version)
        header, header_size = entity_reader(schema.__header_schema__)(frame, 0)
        body, _ = entity_reader(schema)(frame, header_size)
    except Exception as exc:  # kio raises many kinds of errors on garbage
        raise MalformedRequest(f"cannot parse api_key={api_key} v{api_version} ({exc}): the request "
                               "does not match Kafka's schema of that version") from exc
    return Request(api_key, api_version, header.correlation_id, header.client_id, body)


def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


def encode_response(api_key: int, api_version: int, correlation_id: int, data: dict) -> bytes:
    """A complete response frame (size prefix included) for a handler's dict."""
    schema = response_schema(api_key, api_version)
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    entity_writer(schema.__header_schema__)(buffer, schema.__header_schema__(correlation_id=correlation_id))
    entity_writer(schema)(buffer, build(schema, data))
    frame = buffer.getbuffer()
    _INT32.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def unsupported_version_response(api_key: int, api_version: int, correlation_id: int) -> bytes | None:
    """An UNSUPPORTED_VERSION answer for an API or version the broker does not serve, if the
    response of that API has a top-level error code (otherwise the connection is closed)."""
    try:
        schema = response_schema(api_key, api_version)
    except KioIndexError:  # an API or version kio does not know either
        return None
    if "error_code" not in {f.name for f in dataclasses.fields(schema)}:
        return None
    return encode_response(api_key, api_version, correlation_id,
                           {"error_code": ErrorCode.unsupported_version})


def build(schema: type, data: dict) -> Any:
    """The kio entity `schema` made from `data`; see the module docstring."""
    values = {}
    for name, convert, default in _plan(schema):
        value = data.get(name, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                continue
            values[name] = default
        else:
            values[name] = convert(value)
    return schema(**values)


_MISSING = object()


@cache
def _plan(schema: type) -> list[tuple[str, Callable[[Any], Any], Any]]:
    plan = []
    for field in dataclasses.fields(schema):
        convert, zero = _converter(field)
        has_default = (field.default is not dataclasses.MISSING
                       or field.default_factory is not dataclasses.MISSING)
        plan.append((field.name, convert, _MISSING if has_default else zero))
    return plan


def _converter(field: dataclasses.Field) -> tuple[Callable[[Any], Any], Any]:
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField):
        inner = kind.type_
        return (lambda items: None if items is None else tuple(build(inner, i) for i in items)), ()
    if isinstance(kind, EntityField):
        inner = kind.type_
        return (lambda item: None if item is None else build(inner, item)), None
    kafka_type = get_schema_field_type(field)
    if kind.is_array:
        return tuple, ()
    return _PRIMITIVES.get(kafka_type, (_identity, 0))


def _identity(value: Any) -> Any:
    return value


def _error_code(value: int | ErrorCode) -> ErrorCode:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


def _millis(value: int | datetime.timedelta) -> datetime.timedelta:
    return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)


def _datetime(value: int | datetime.datetime | None) -> datetime.datetime | None:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return _EPOCH + datetime.timedelta(milliseconds=value)


_PRIMITIVES: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "error_code": (_error_code, ErrorCode.none),
    "timedelta_i32": (_millis, datetime.timedelta(0)),
    "timedelta_i64": (_millis, datetime.timedelta(0)),
    "datetime_i64": (_datetime, _EPOCH),
    "string": (_identity, ""),
    "bytes": (_identity, b""),
    "records": (_identity, None),
    "bool": (bool, False),
    "uuid": (_identity, uuid.UUID(int=0)),
    "float64": (float, 0.0),
}
