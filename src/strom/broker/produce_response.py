"""Produce responses (versions 3 to 9) encoded directly: kio's generic writer costs more than the
append itself for small requests. `tests/broker/test_produce_request.py` checks the bytes against
kio for every version."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from strom.broker.wire import array_length, nullable_string, string

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class PartitionResult:
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()  # (index of the record in its batch, message)


def encode(version: int, correlation_id: int,
           topics: Sequence[tuple[str, Sequence[PartitionResult]]]) -> bytes:
    """The response frame, size prefix included."""
    flexible = version >= 9
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(correlation_id)
    if flexible:
        out += b"\0"  # response header v1: no tagged fields
    out += array_length(len(topics), flexible)
    for name, partitions in topics:
        out += string(name, flexible) + array_length(len(partitions), flexible)
        for p in partitions:
            out += _PARTITION.pack(p.index, p.error_code, p.base_offset, p.log_append_time)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            if version >= 8:
                out += array_length(len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    out += _I32.pack(batch_index) + nullable_string(message, flexible)
                    if flexible:
                        out += b"\0"
                out += nullable_string(p.error_message, flexible)
            if flexible:
                out += b"\0"
        if flexible:
            out += b"\0"
    out += _I32.pack(0)  # throttle_time_ms
    if flexible:
        out += b"\0"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
