"""Binary layouts of windowed keys, byte-compatible with Kafka Streams.

Store and changelog keys of a window store are ``key + 8-byte window start + 4-byte sequence number``
(WindowKeySchema); of a session store ``key + 8-byte session end + 8-byte session start``
(SessionKeySchema). All numbers are big-endian, as Kafka writes them, so a Kafka Streams application
and strom read each other's changelogs and windowed topics.
"""

from __future__ import annotations

import struct

_LONG = struct.Struct(">q")
WINDOW_SUFFIX = struct.Struct(">qi")
"""8-byte window start and 4-byte sequence number."""
_SESSION_SUFFIX = struct.Struct(">qq")

TIMESTAMP_SIZE = 8
SEQNUM_SIZE = 4
WINDOW_SUFFIX_SIZE = TIMESTAMP_SIZE + SEQNUM_SIZE
SESSION_SUFFIX_SIZE = 2 * TIMESTAMP_SIZE
MAX_TIMESTAMP = 2**63 - 1
MAX_SEQNUM = 2**31 - 1


def window_store_key(key: bytes, window_start: int, seqnum: int = 0) -> bytes:
    return key + WINDOW_SUFFIX.pack(window_start, seqnum)


def split_window_store_key(binary: bytes) -> tuple[bytes, int, int]:
    """(key, window start, sequence number) of a window store key."""
    start, seqnum = WINDOW_SUFFIX.unpack_from(binary, len(binary) - WINDOW_SUFFIX_SIZE)
    return binary[:-WINDOW_SUFFIX_SIZE], start, seqnum


def window_start_of(binary: bytes) -> int:
    return _LONG.unpack_from(binary, len(binary) - WINDOW_SUFFIX_SIZE)[0]


def session_store_key(key: bytes, start: int, end: int) -> bytes:
    return key + _SESSION_SUFFIX.pack(end, start)


def split_session_store_key(binary: bytes) -> tuple[bytes, int, int]:
    """(key, session start, session end) of a session store key."""
    end, start = _SESSION_SUFFIX.unpack_from(binary, len(binary) - SESSION_SUFFIX_SIZE)
    return binary[:-SESSION_SUFFIX_SIZE], start, end


def session_end_of(binary: bytes) -> int:
    return _LONG.unpack_from(binary, len(binary) - SESSION_SUFFIX_SIZE)[0]


def time_windowed_key(key: bytes, window_start: int) -> bytes:
    """The wire format of a time-windowed key in a topic: key + 8-byte window start."""
    return key + _LONG.pack(window_start)


def split_time_windowed_key(binary: bytes) -> tuple[bytes, int]:
    return binary[:-TIMESTAMP_SIZE], _LONG.unpack_from(binary, len(binary) - TIMESTAMP_SIZE)[0]
