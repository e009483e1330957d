"""Key and value formats of ``consume`` and ``produce`` (``--key-deserializer``, ``--value-serializer``
...): between the bytes of a record and the bytes of a line, with Kafka's number encodings, or Schema
Registry formats (Avro, JSON Schema, Protobuf in Confluent's wire format) shown and read as JSON lines."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click
from google.protobuf import json_format

from strom.cli.output import escaped
from strom.cli.protobuf_json import ProtobufJson
from strom.errors import ConfigError, SerializationError, StromError
from strom.kafka import schema_registry
from strom.kafka.serdes import DoubleSerde, IntegerSerde, LongSerde


@dataclass(frozen=True)
class Format:
    """``show`` turns record bytes into output bytes; ``parse`` turns input text into record bytes.
    A Schema Registry format is ``bound`` to its registry settings and topic before use."""

    name: str
    show: Callable[[bytes], bytes]
    parse: Callable[[bytes], bytes]
    bind: Callable[[Mapping[str, str], str, bool, str | None], Format] | None = None

    def bound(self, config: Mapping[str, str], topic: str, is_key: bool, schema: str | None = None) -> Format:
        """The format for ``topic``'s keys or values: itself, or a registry format with its serde."""
        return self if self.bind is None else self.bind(config, topic, is_key, schema)


def _number(serde: LongSerde | IntegerSerde | DoubleSerde, kind: type) -> tuple[Callable, Callable]:
    def show(data: bytes) -> bytes:
        return repr(serde.deserialize(None, data)).encode()

    def parse(text: bytes) -> bytes:
        return serde.serialize(None, kind(text.decode()))
    return show, parse


def _json_parse(text: bytes) -> bytes:
    json.loads(text)  # validated, written as given
    return text


FORMATS: dict[str, Format] = {
    "string": Format("string", lambda data: escaped(data).encode(), lambda text: text),
    "long": Format("long", *_number(LongSerde(), int)),
    "int": Format("int", *_number(IntegerSerde(), int)),
    "double": Format("double", *_number(DoubleSerde(), float)),
    "json": Format("json", lambda data: json.dumps(json.loads(data), ensure_ascii=False).encode(),
                   _json_parse),
    "hex": Format("hex", lambda data: data.hex().encode(), lambda text: bytes.fromhex(text.decode())),
    "base64": Format("base64", base64.b64encode, lambda text: base64.b64decode(text, validate=True)),
    "bytes": Format("bytes", lambda data: data, lambda text: text),
}
"""``string`` escapes bytes that are not UTF-8 and control characters (\\xNN); ``bytes`` writes and
reads them unchanged."""


def _jsonable(value: Any) -> Any:
    """What Avro and JSON Schema values hold that JSON has no type for: bytes as Avro's JSON encoding
    writes them (one character per byte), logical types (dates, times, decimals, UUIDs) as text."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _registry_format(name: str) -> Format:
    """A Schema Registry format: records shown as one JSON document per line, JSON lines written."""

    def unbound(_data: bytes) -> bytes:
        raise AssertionError(f"the {name} format is used before Format.bound")

    def bind(config: Mapping[str, str], topic: str, is_key: bool, schema: str | None) -> Format:
        which = "key" if is_key else "value"
        if schema_registry.URL not in config:
            raise ConfigError(f"The {name} {which} format needs the registry: -X {schema_registry.URL}=URL "
                              "(e.g. http://localhost:8081).")
        if name == "protobuf":
            return _protobuf_format(config, topic, is_key)
        settings = dict(config)
        if schema is None:
            settings.setdefault("auto.register.schemas", "false")  # the registered schema is written as is
        serde = schema_registry.serde_for_format(name, settings, is_key=is_key, schema=schema)
        _check_reachable(serde.client, config[schema_registry.URL])  # type: ignore[attr-defined]

        def show(data: bytes) -> bytes:
            return json.dumps(serde.deserialize(topic, data), ensure_ascii=False, default=_jsonable).encode()

        def parse(text: bytes) -> bytes:
            return serde.serialize(topic, json.loads(text))  # type: ignore[return-value]

        return Format(name, show, parse)

    return Format(name, unbound, unbound, bind)


def _protobuf_format(config: Mapping[str, str], topic: str, is_key: bool) -> Format:
    """Protobuf without generated classes: read with the writer's schema, shown in protobuf's JSON form;
    written as the first message of the subject's latest schema (``<topic>-key`` / ``<topic>-value``)."""
    client_config, _ = schema_registry.split_config(config, is_key=is_key)
    client = schema_registry.registry_client(client_config)
    _check_reachable(client, client_config["url"])
    messages = ProtobufJson(client)
    subject = f"{topic}-{'key' if is_key else 'value'}"
    write: Callable[[Any], bytes] | None = None

    def show(data: bytes) -> bytes:
        try:
            message = messages(data)
        except SerializationError:
            raise
        except Exception as exc:  # the registry's or protobuf's error: the caller names the record
            raise SerializationError(str(exc)) from exc
        return json.dumps(message, ensure_ascii=False).encode()

    def parse(text: bytes) -> bytes:
        nonlocal write
        if write is None:
            try:
                write = messages.writer(subject)
            except Exception as exc:
                raise StromError(f"Subject {subject!r} has no protobuf schema in the registry ({exc}): "
                                 "register it first (protobuf is written with the subject's latest schema)."
                                 ) from exc
        try:
            return write(json.loads(text))
        except json_format.ParseError as exc:
            raise SerializationError(str(exc)) from exc

    return Format("protobuf", show, parse)


def _check_reachable(client: Any, url: str) -> None:
    try:
        client.get_subjects()
    except Exception as exc:
        raise StromError(f"The Schema Registry at {url} did not answer: {exc}. Check -X "
                         f"{schema_registry.URL} (and schema.registry.* / basic.auth.* for a secured "
                         "registry).") from exc


FORMATS.update((name, _registry_format(name)) for name in schema_registry.FORMATS)


def format_option(*names: str, help: str) -> Callable:
    return click.option(*names, type=click.Choice(list(FORMATS)), default="string", show_default=True,
                        callback=lambda _ctx, _param, value: FORMATS[value], help=help)


def convert(fmt: Format, how: Callable[[bytes], bytes], data: bytes, what: str) -> bytes:
    """Applies ``fmt.show`` or ``fmt.parse``; a failure names the record or line and what to use."""
    try:
        return how(data)
    except (SerializationError, ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        reason = str(exc.__cause__ or exc)
        raise SerializationError(f"{what} ({len(data)} bytes {escaped(data[:40])}) is not {fmt.name}: "
                                 f"{reason}. Choose the matching format, e.g. hex or string.") from exc
