"""The typed window store of ValueAndTimestamp values (what windowed aggregations keep)."""

from __future__ import annotations

from typing import Any

from strom.kafka.serdes import Serde
from strom.streams.internals.tuples import new_tuple
from strom.streams.state.internals.caching import CachingWindowStore
from strom.streams.state.internals.metered.fused_lines import (
    CACHE_READ,
    CACHE_WRITE,
    PAIR_DECODE,
    PAIR_ENCODE,
)
from strom.streams.state.internals.metered.window import MeteredWindowStore
from strom.streams.state.internals.timestamps import TIMESTAMP_SIZE, split_timestamped, with_timestamp
from strom.streams.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde
from strom.streams.state.window.schemas import WINDOW_SUFFIX

# MeteredTimestampedWindowStore.fused_window_update's lines: the metered fetch and put and the caching
# layer's (the window store key, the latest window start) for key k and window start s
_WINDOW_READ_LINES = (
    "{p}store.num_fetches += 1",
    "try:",
    "    kb = {p}key_encode(k)",
    "except Exception:",
    "    kb = {p}key_bytes(k)",  # the serializer's path, or its error
    "kb = kb + {p}suffix(s, 0)",  # schemas.window_store_key
    *CACHE_READ,
    *PAIR_DECODE,
)
_WINDOW_WRITE_LINES = (
    "{p}store.num_puts += 1",
    *PAIR_ENCODE,
    "if s > {p}caching.latest_start:",
    "    {p}caching.latest_start = s",
    *CACHE_WRITE,
)


class MeteredTimestampedWindowStore(MeteredWindowStore):
    """Values are ValueAndTimestamp (what windowed aggregations keep), stored as Kafka does: an 8-byte
    timestamp, then the value bytes. fetch and put, once per record of an aggregation, use the bound
    encoder and decoder (one struct call for numbers); the serde reports values of the wrong type or
    layout."""

    timestamped = True

    def _wrap_value_serde(self, value_serde: Serde[Any]) -> Any:
        self._plain_to = value_serde.serializer().serialize
        self._plain_from = value_serde.deserializer().deserialize
        self._pair_codec = ValueAndTimestampSerde(value_serde)
        return self._pair_codec

    def fused_window_update(self) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Any]] | None:
        """``fetch`` then ``put`` of one key's window as lines of Python for a fused windowed
        aggregation, as ``MeteredTimestampedKeyValueStore.fused_timestamped_update`` for a key: ``read``
        takes key ``k`` and window start ``s``, sets ``r`` (None: no value) and then ``rv`` and ``rt``;
        ``write`` writes value ``n`` with timestamp ``t`` into the record cache under the same store key.
        Same bytes, metrics and errors as ``fetch`` and ``put``; None when the store is not cached."""
        caching = self.wrapped
        if not isinstance(caching, CachingWindowStore) or not self._open:
            return None
        unpack, pack, kinds = self._pair_codec.pair_codec(self._topic)
        entries = caching.cache_entries
        names = {
            "{p}store": self, "{p}caching": caching, "{p}key_encode": self._key_encode,
            "{p}key_bytes": self._key_bytes, "{p}suffix": WINDOW_SUFFIX.pack,
            "{p}lookup": entries.get, "{p}mark_used": entries.move_to_end,
            "{p}below": caching.wrapped.get_binary, "{p}unpack": unpack, "{p}from_bytes": self._from_bytes,
            "{p}pack": pack, "{p}kinds": kinds, "{p}encode": self._value_encode,
            "{p}to_bytes": self._to_bytes, "{p}vat": ValueAndTimestamp,
            "{p}put_dirty": caching.put_dirty_raw, "{p}context": caching.context,
        }
        return _WINDOW_READ_LINES, _WINDOW_WRITE_LINES, names

    def _to_bytes(self, value: Any) -> bytes | None:
        if type(value) is ValueAndTimestamp:
            return with_timestamp(value[1], self._plain_to(self._topic, value[0]))
        return self._value_ser(self._topic, value)  # None, or the serde's error

    def _from_bytes(self, data: bytes | None) -> Any:
        if data is not None and len(data) >= TIMESTAMP_SIZE:
            timestamp, plain = split_timestamped(data)
            return new_tuple(ValueAndTimestamp, (self._plain_from(self._topic, plain), timestamp))
        return self._value_de(self._topic, data)  # None, or the serde's error

    def _flushed_timestamp(self, data: bytes | None, timestamp: int) -> int:
        """The aggregate's own timestamp (the latest of its records), as Kafka's
        TimestampedCacheFlushListener forwards it; the last writer's for a delete."""
        return timestamp if data is None or len(data) < TIMESTAMP_SIZE else split_timestamped(data)[0]

    def _plain(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self._value_decode(data)[0]
        except Exception:
            return self._from_bytes(data)[0]  # the serde's error

    def put(self, key: Any, value: Any, window_start: int) -> None:
        """Store a ValueAndTimestamp for a window; None deletes."""
        self.num_puts += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        try:
            data = self._value_encode(value)
        except Exception:
            data = self._to_bytes(value)  # None, or the serde's error
        self.wrapped.put(key_bytes, data, window_start)

    def fetch(self, key: Any, window_start: int, *more: Any) -> Any:
        if more:
            return self.fetch_more(key, window_start, more)
        self.num_fetches += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        data = self.wrapped.fetch(key_bytes, window_start)
        if data is None:
            return None
        try:
            return self._value_decode(data)
        except Exception:
            return self._from_bytes(data)  # the serde's error
