"""Timestamps in strom's stores, in one place: the constants, the sortable encoding inside ordered keys,
and the 8-byte prefix of timestamped values.

- ``MIN_TIMESTAMP`` / ``MAX_TIMESTAMP``: Java's Long range, as Kafka Streams bounds time (a window
  that would end later ends at ``MAX_TIMESTAMP``; "no time yet" in a tracker of the smallest time).
- ``NO_TIMESTAMP``: Kafka's ``RecordBatch.NO_TIMESTAMP`` (-1), a value stored without a record time.
- ``sortable`` / ``from_sortable``: 8 bytes whose byte order is the numeric order, negative
  timestamps included, so a range scan over keys is a scan over time.
- ``with_timestamp`` / ``split_timestamped``: Kafka's timestamped value layout, an 8-byte big-endian
  timestamp followed by the plain value bytes (timestamped key-value and window stores; their
  changelogs carry the plain value with the timestamp as the record's).
"""

from __future__ import annotations

import struct

MIN_TIMESTAMP, MAX_TIMESTAMP = -(2**63), 2**63 - 1
NO_TIMESTAMP = -1
TIMESTAMP_SIZE = 8

_UNSIGNED = struct.Struct(">Q")
_SIGNED = struct.Struct(">q")
pack_timestamp = _SIGNED.pack
"""The 8-byte big-endian timestamp (a bound C method: hot paths call it once per record)."""
unpack_timestamp = _SIGNED.unpack_from
"""``unpack_timestamp(raw)[0]``: the timestamp at the start of ``raw``."""


def sortable(timestamp: int) -> bytes:
    return _UNSIGNED.pack(timestamp - MIN_TIMESTAMP)


def from_sortable(raw: bytes, offset: int = 0) -> int:
    return _UNSIGNED.unpack_from(raw, offset)[0] + MIN_TIMESTAMP


def with_timestamp(timestamp: int, plain: bytes) -> bytes:
    """A timestamped value: the timestamp, then the plain value bytes."""
    return pack_timestamp(timestamp) + plain


def split_timestamped(stored: bytes) -> tuple[int, bytes]:
    """(timestamp, plain value bytes) of a timestamped value."""
    return unpack_timestamp(stored)[0], stored[TIMESTAMP_SIZE:]
