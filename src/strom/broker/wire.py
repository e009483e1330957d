"""Kafka protocol primitives for the bytes strom encodes by hand (the hot responses and record
batches); everything else is encoded by kio."""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Zigzag-encoded, as record fields are."""
    return uvarint((value << 1) ^ (value >> 63))


def array_length(count: int, flexible: bool) -> bytes:
    return uvarint(count + 1) if flexible else _I32.pack(count)


def string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def nullable_string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\0" if flexible else _I16.pack(-1)
    return string(text, flexible)
