"""Key and value formats of ``consume`` and ``produce`` (``--key-deserializer``, ``--value-serializer``
...): between the bytes of a record and the bytes of a line, with Kafka's number encodings."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass

import click

from strom.cli.output import escaped
from strom.errors import SerializationError
from strom.kafka.serdes import DoubleSerde, IntegerSerde, LongSerde


@dataclass(frozen=True)
class Format:
    """``show`` turns record bytes into output bytes; ``parse`` turns input text into record bytes."""

    name: str
    show: Callable[[bytes], bytes]
    parse: Callable[[bytes], bytes]


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
