"""Timestamps inside the keys of ordered byte stores: 8 bytes whose byte order is the numeric order,
negative timestamps included, so a range scan over keys is a scan over time."""

from __future__ import annotations

import struct

MIN_TIMESTAMP, MAX_TIMESTAMP = -(2**63), 2**63 - 1
_UNSIGNED = struct.Struct(">Q")


def sortable(timestamp: int) -> bytes:
    return _UNSIGNED.pack(timestamp - MIN_TIMESTAMP)


def from_sortable(raw: bytes, offset: int = 0) -> int:
    return _UNSIGNED.unpack_from(raw, offset)[0] + MIN_TIMESTAMP
