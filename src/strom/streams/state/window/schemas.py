"""Binary layouts of windowed keys, byte-compatible with Kafka Streams.

Store and changelog keys of a window store are ``key + 8-byte window start + 4-byte sequence number``
(WindowKeySchema); of a session store ``key + 8-byte session end + 8-byte session start``
(SessionKeySchema). All numbers are big-endian, as Kafka writes them, so a Kafka Streams application
and strom read each other's changelogs and windowed topics.
"""

from __future__ import annotations

import struct

from strom.streams.state.internals.timestamps import MAX_TIMESTAMP, TIMESTAMP_SIZE

_LONG = struct.Struct(">q")
WINDOW_SUFFIX = struct.Struct(">qi")
"""8-byte window start and 4-byte sequence number."""
_SESSION_SUFFIX = struct.Struct(">qq")

SEQNUM_SIZE = 4
WINDOW_SUFFIX_SIZE = TIMESTAMP_SIZE + SEQNUM_SIZE
SESSION_SUFFIX_SIZE = 2 * TIMESTAMP_SIZE
MAX_SEQNUM = 2**31 - 1


def window_store_key(key: bytes, window_start: int, seqnum: int = 0) -> bytes:
    return key + WINDOW_SUFFIX.pack(window_start, seqnum)


def split_window_store_key(binary: bytes) -> tuple[bytes, int, int]:
    """(key, window start, sequence number) of a window store key."""
    start, seqnum = WINDOW_SUFFIX.unpack_from(binary, len(binary) - WINDOW_SUFFIX_SIZE)
    return binary[:-WINDOW_SUFFIX_SIZE], start, seqnum


def upper_range(key: bytes, max_suffix: bytes) -> bytes:
    """An upper bound of every store key ``k + suffix`` with ``k <= key`` and ``suffix <= max_suffix``
    (suffixes of one length), for range scans over a key range.

    ``key + max_suffix`` is not enough: store keys of variable-length keys interleave, so a key's prefix
    ``p`` sorts before it while ``p + suffix`` may sort after ``key + suffix``. The bound is the largest
    ``prefix + max_suffix`` over the prefixes of ``key`` (the problem Kafka's OrderedBytes.upperRange solves).
    """
    return max(key[:length] + max_suffix for length in range(len(key) + 1))


def window_key_upper_bound(key: bytes, latest_start: int) -> bytes:
    """Upper bound of the window store keys of keys <= ``key`` in windows starting by ``latest_start``."""
    return upper_range(key, WINDOW_SUFFIX.pack(latest_start, MAX_SEQNUM))


def session_key_upper_bound(key: bytes, latest_end: int) -> bytes:
    """Upper bound of the session store keys of keys <= ``key`` in sessions ending by ``latest_end``."""
    return upper_range(key, _SESSION_SUFFIX.pack(latest_end, MAX_TIMESTAMP))


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
