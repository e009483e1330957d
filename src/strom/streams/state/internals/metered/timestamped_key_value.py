"""The typed key-value store of ValueAndTimestamp values (what table aggregations keep)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from strom.streams.internals.compiled import prefixed
from strom.streams.internals.tuples import new_tuple
from strom.streams.state.context import FlushListener
from strom.streams.state.internals.caching import CachingKeyValueStore
from strom.streams.state.internals.metered.fused_lines import (
    CACHE_WRITE,
    LOOKUP_LINES,
    PAIR_DECODE,
    PAIR_ENCODE,
)
from strom.streams.state.internals.metered.key_value import MeteredKeyValueStore
from strom.streams.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde

_PAIR_READ_LINES = (*LOOKUP_LINES, *PAIR_DECODE)
_PAIR_WRITE_LINES = ("{p}metrics.put += 1", *PAIR_ENCODE, *CACHE_WRITE)


class MeteredTimestampedKeyValueStore(MeteredKeyValueStore):
    """Values are ValueAndTimestamp, stored as Kafka does: 8-byte timestamp, then the value bytes."""

    def _wrap_value_serde(self, serde: Any) -> Any:
        self._pair_codec = ValueAndTimestampSerde(serde)
        return self._pair_codec

    def fused_timestamped_update(self) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Any]] | None:
        """``fused_read_modify_write`` for a caller that wants the value and timestamp apart (a fused
        aggregation): ``read`` sets ``r`` (None: no value) and then ``rv`` and ``rt``; ``write`` writes
        value ``n`` with timestamp ``t``. No ValueAndTimestamp is made for a fixed-width number, whose
        read and write are one struct call each; the bytes are the ones ``get`` and ``put`` read and
        write. None when the store is not cached."""
        names = self._fused_names()
        if names is None:
            return None
        unpack, pack, kinds = self._pair_codec.pair_codec(self._topic)
        names.update({"{p}unpack": unpack, "{p}pack": pack, "{p}kinds": kinds, "{p}vat": ValueAndTimestamp})
        return self._read_below(_PAIR_READ_LINES, names), _PAIR_WRITE_LINES, names

    def fuse_flush(self, lines: tuple[str, ...], names: dict[str, Any]) -> None:
        """The flush listener's work on a flushed value as lines of Python over the locals ``k, n, t, c``
        (typed key, plain value, its timestamp, the entry's record context), names ``{p}``-prefixed:
        handed to the caching layer with the decode of the entry's bytes before them (the listener's
        own typed path, inlined), for its fused flush."""
        caching = self.wrapped
        if not isinstance(caching, CachingKeyValueStore):
            return
        unpack, _, _ = self._pair_codec.pair_codec(self._topic)
        decode = (
            "try:",  # as the listener's decode: the serdes' own methods when a fast one refuses
            "    k = {p}key_decode(kb)",
            "    t, n = {p}unpack(wb)",
            "except Exception:",
            "    k = {p}key_de({p}topic, kb)",
            "    n, t = {p}value_de({p}topic, wb)",
        )
        listener_lines, listener_names = prefixed(lines, names, "{p}f_")
        caching.fuse_flush((*decode, *listener_lines), {
            **listener_names, "{p}key_decode": self._key_decode, "{p}unpack": unpack,
            "{p}key_de": self._key_de, "{p}value_de": self._value_de, "{p}topic": self._topic})

    def put_all_timestamped(self, entries: Iterable[tuple[Any, Any, int]]) -> int:
        """``put(key, ValueAndTimestamp.make(value, timestamp))`` for each ``(key, value, timestamp)``,
        writing the same bytes in one pass through the layer below's ``put_all``: no ValueAndTimestamp
        for a fixed-width value (one struct call, as ``fused_timestamped_update``). Returns how many
        were put. A global table's catch-up writes its batches this way."""
        if not self._open:
            self._raw_key(None)  # raises the right error
        before = self.metrics.put
        self.wrapped.put_all(self._timestamped_pairs(entries))
        return self.metrics.put - before

    def _timestamped_pairs(self, entries: Iterable[tuple[Any, Any, int]]
                           ) -> Iterator[tuple[bytes, bytes | None]]:
        _, pack, kinds = self._pair_codec.pair_codec(self._topic)
        key_encode, value_encode = self._key_encode, self._value_encode
        count = 0
        try:
            for key, value, timestamp in entries:
                count += 1
                if key is None:
                    self._raw_key(key)
                try:
                    raw_key = key_encode(key)
                    if value is None:
                        raw_value = None
                    elif type(value) in kinds:
                        raw_value = pack(timestamp, value)  # type: ignore[misc]
                    else:
                        raw_value = value_encode(new_tuple(ValueAndTimestamp, (value, timestamp)))
                except Exception:
                    raw_key = self._key_ser(self._topic, key)
                    raw_value = self._value_ser(self._topic, ValueAndTimestamp.make(value, timestamp))
                yield raw_key, raw_value
        finally:
            self.metrics.put += count

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool) -> bool:
        """The listener gets plain values; the timestamp is the new value's (the entry's for a delete)."""

        def unwrapped(key: Any, new: ValueAndTimestamp[Any] | None, old: ValueAndTimestamp[Any] | None,
                      timestamp: int) -> None:
            listener(key, None if new is None else new.value, None if old is None else old.value,
                     timestamp if new is None else new.timestamp)

        return super().set_flush_listener(unwrapped, send_old_values)
