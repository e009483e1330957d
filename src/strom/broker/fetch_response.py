"""Fetch responses (versions 4 to 12) as frame parts, so record data goes file -> socket unread.

Every other response is encoded by kio. Fetch is the hot path: its records are byte ranges of
segment files, sent with sendfile(2) between the encoded fields instead of being read into memory
and copied through an encoder. `tests/broker/test_fetch_response.py` checks the encoding
byte for byte against kio for every version.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from strom.broker.log.segment import FileRange
from strom.broker.protocol import EncodedResponse, Part
from strom.broker.wire import array_length, string, uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")


@dataclass(frozen=True, slots=True)
class PartitionData:
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: Sequence[tuple[int, int]] | None  # (producer id, first offset)
    records: FileRange | bytes


def encode(version: int, correlation_id: int,
           topics: Sequence[tuple[str, Sequence[PartitionData]]]) -> EncodedResponse:
    flexible = version >= 12
    parts: list[Part] = []
    out = bytearray(_I32.pack(correlation_id))
    if flexible:
        out += b"\0"  # response header v1: no tagged fields
    out += _I32.pack(0)  # throttle_time_ms
    if version >= 7:
        out += _I16.pack(0) + _I32.pack(0)  # error_code, session_id (no fetch sessions)
    out += array_length(len(topics), flexible)
    for name, partitions in topics:
        out += string(name, flexible) + array_length(len(partitions), flexible)
        for p in partitions:
            out += _PARTITION_HEAD.pack(p.partition_index, p.error_code, p.high_watermark,
                                        p.last_stable_offset)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            out += _aborted(p.aborted_transactions, flexible)
            if version >= 11:
                out += _I32.pack(-1)  # preferred_read_replica
            size = p.records.length if isinstance(p.records, FileRange) else len(p.records)
            out += uvarint(size + 1) if flexible else _I32.pack(size)
            parts.append(bytes(out))
            parts.append(p.records)
            out = bytearray(b"\0" if flexible else b"")  # the partition's tagged fields
        if flexible:
            out += b"\0"  # the topic's tagged fields
    if flexible:
        out += b"\0"  # the response's tagged fields
    parts.append(bytes(out))
    total = sum(p.length if isinstance(p, FileRange) else len(p) for p in parts)
    return EncodedResponse([_I32.pack(total), *[p for p in parts if isinstance(p, FileRange) or p]])


def _aborted(aborted: Sequence[tuple[int, int]] | None, flexible: bool) -> bytes:
    if aborted is None:
        return b"\0" if flexible else _I32.pack(-1)
    out = bytearray(array_length(len(aborted), flexible))
    for producer_id, first_offset in aborted:
        out += _ABORTED.pack(producer_id, first_offset)
        if flexible:
            out += b"\0"
    return bytes(out)
