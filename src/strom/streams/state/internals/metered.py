"""The metered layers, outermost: turn typed keys and values into bytes and count every operation, for
key-value, timestamped key-value, window, timestamped window and session stores.

Processors and interactive queries talk to these layers; everything below works on bytes. They also
adapt the caching layer's flush listener to typed values (as Kafka's MeteredKeyValueStore.setFlushListener).
Timestamped stores hold ``ValueAndTimestamp`` values, stored as Kafka does: an 8-byte timestamp
followed by the serialized value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

from strom.errors import InvalidStateStoreError, NullKeyError
from strom.kafka.serdes import Serde, decoder_of, encoder_of
from strom.streams.internals.compiled import prefixed
from strom.streams.kstream.windows import SessionWindow, Window, Windowed, new_windowed
from strom.streams.state.context import FlushListener, StateStore, StateStoreContext
from strom.streams.state.internals.caching import CachingKeyValueStore, CachingWindowStore
from strom.streams.state.internals.layer import StoreLayer
from strom.streams.state.internals.timestamps import (
    MAX_TIMESTAMP,
    TIMESTAMP_SIZE,
    split_timestamped,
    with_timestamp,
)
from strom.streams.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde
from strom.streams.state.versioned import VersionedRecord, check_timestamp
from strom.streams.state.window.reads import WindowFetches
from strom.streams.state.window.schemas import WINDOW_SUFFIX

_IMMUTABLE_KEYS = frozenset({str, bytes, int, float})
"""Key types whose bytes cannot change between an aggregation's read and its write of the same object."""

# MeteredKeyValueStore.fused_read_modify_write's lines (locals k, kb, r, w; names {p}-prefixed)
_KEY_LINES = (
    "if k is None or not {p}store._open:",
    "    {p}raw_key_of(k)",  # raises the right error
    "try:",
    "    kb = {p}key_encode(k)",
    "except Exception:",
    "    kb = {p}raw_key_of(k)",
)
# the record cache's read and write of the store key kb (r: its raw value or None; wb: the bytes to
# write), a timestamped value's decode into rv and rt and its encode from n and t (for fixed-width
# numbers one struct call each, no ValueAndTimestamp); the full serde paths are {p}from_bytes and
# {p}to_bytes, which decide what the fast functions refuse
_CACHE_READ = (
    "e = {p}lookup(kb)",
    "if e is None:",
    "    r = {p}below(kb)",
    "else:",
    "    {p}mark_used(kb)",
    "    r = e.value",
)
_CACHE_WRITE = ("{p}put_dirty(kb, wb, {p}context.record_context)",)
_PAIR_DECODE = (
    "if r is not None:",
    "    try:",
    "        rt, rv = {p}unpack(r)",
    "    except Exception:",
    "        rv, rt = {p}from_bytes(r)",
)
_PAIR_ENCODE = (
    "try:",
    "    if type(n) in {p}kinds:",
    "        wb = {p}pack(t, n)",
    "    else:",
    "        wb = {p}encode(_new_tuple({p}vat, (n, t)))",
    "except Exception:",
    "    wb = {p}to_bytes(_new_tuple({p}vat, (n, t)))",
)
_LOOKUP_LINES = ("{p}metrics.get += 1", *_KEY_LINES, *_CACHE_READ)
_READ_LINES = (
    *_LOOKUP_LINES,
    "if r is not None:",
    "    try:",
    "        r = {p}decode(r)",
    "    except Exception:",
    "        r = {p}from_bytes(r)",
)
_WRITE_LINES = (
    "{p}metrics.put += 1",
    "try:",
    "    wb = None if w is None else {p}encode(w)",
    "except Exception:",
    "    wb = {p}to_bytes(w)",
    *_CACHE_WRITE,
)
_PAIR_READ_LINES = (*_LOOKUP_LINES, *_PAIR_DECODE)
_PAIR_WRITE_LINES = ("{p}metrics.put += 1", *_PAIR_ENCODE, *_CACHE_WRITE)
# MeteredTimestampedWindowStore.fused_window_update's lines: the metered fetch and put and the caching
# layer's (the window store key, the latest window start) for key k and window start s
_WINDOW_READ_LINES = (
    "{p}store.num_fetches += 1",
    "try:",
    "    kb = {p}key_encode(k)",
    "except Exception:",
    "    kb = {p}key_bytes(k)",  # the serializer's path, or its error
    "kb = kb + {p}suffix(s, 0)",  # schemas.window_store_key
    *_CACHE_READ,
    *_PAIR_DECODE,
)
_WINDOW_WRITE_LINES = (
    "{p}store.num_puts += 1",
    *_PAIR_ENCODE,
    "if s > {p}caching.latest_start:",
    "    {p}caching.latest_start = s",
    *_CACHE_WRITE,
)


class StoreMetrics:
    """Operation counts of one store. Counts only: timing every call would cost more than the calls.

    Plain int attributes, because a store counts on every get and put.
    """

    __slots__ = ("delete", "flush", "get", "prefix_scan", "put", "put_all", "put_if_absent", "range")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    @property
    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class MeteredStore(StoreLayer):
    """What every typed store shares: serdes bound at ``init``, key checks, metrics, open state."""

    def __init__(self, wrapped: Any, key_serde: Any, value_serde: Any, metrics_scope: str) -> None:
        super().__init__(wrapped)
        self._key_serde = key_serde
        self._value_serde = value_serde
        self.metrics_scope = metrics_scope
        self.metrics = StoreMetrics()
        self._open = False
        self._topic: str | None = None

    @property
    def is_open(self) -> bool:
        return self._open

    def _wrap_value_serde(self, serde: Any) -> Any:
        return serde

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        key_serde = self._key_serde if self._key_serde is not None else context.key_serde
        value_serde = self._value_serde if self._value_serde is not None else context.value_serde
        self._key_ser = key_serde.serializer().serialize
        self._key_de = key_serde.deserializer().deserialize
        value_serde = self._wrap_value_serde(value_serde)
        self._value_ser = value_serde.serializer().serialize
        self._value_de = value_serde.deserializer().deserialize
        self._topic = context.changelog_topic(self.name)
        self._key_encode = encoder_of(key_serde.serializer(), self._topic)
        self._value_encode = encoder_of(value_serde.serializer(), self._topic)
        self._key_decode = decoder_of(key_serde.deserializer(), self._topic)
        self._value_decode = decoder_of(value_serde.deserializer(), self._topic)
        self.wrapped.init(context, root)
        self._open = True

    def _raw_key(self, key: Any) -> bytes:
        if not self._open:
            raise InvalidStateStoreError(f"Store {self.name} is not open; use it between init and close.")
        if key is None:
            raise NullKeyError(f"Store {self.name} got a None key; filter out records with None keys "
                               "before a stateful operation.")
        return self._key_ser(self._topic, key)

    def flush(self) -> None:
        self.wrapped.flush()
        self.metrics.flush += 1

    def close(self) -> None:
        self._open = False
        self.wrapped.close()


class MeteredKeyValueStore(MeteredStore):
    """The typed key-value store processors use: ``store.put("alice", 3)``, ``store.get("alice")``."""

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        super().init(context, root)
        self._wrapped_get = self.wrapped.get
        self._wrapped_put = self.wrapped.put

    # get and put are every stateful record's path: the bound encoders first, the serdes' own methods
    # only when an encoder refuses its input (encoder_of's contract)
    def get(self, key: Any) -> Any:
        self.metrics.get += 1
        if key is None or not self._open:
            self._raw_key(key)  # raises the right error
        try:
            raw_key = self._key_encode(key)
        except Exception:
            raw_key = self._key_ser(self._topic, key)
        raw = self._wrapped_get(raw_key)
        if raw is None:
            return None
        try:
            return self._value_decode(raw)
        except Exception:
            return self._value_de(self._topic, raw)

    def put(self, key: Any, value: Any) -> None:
        self.metrics.put += 1
        if key is None or not self._open:
            self._raw_key(key)
        try:
            raw_key = self._key_encode(key)
            raw_value = None if value is None else self._value_encode(value)
        except Exception:
            raw_key, raw_value = self._key_ser(self._topic, key), self._value_ser(self._topic, value)
        self._wrapped_put(raw_key, raw_value)

    def read_modify_write(self) -> tuple[Callable[[Any], Any], Callable[[Any, Any], None]]:
        """``(get, put)`` for a processor that reads a key and then writes the same key (an aggregation):
        behaving as this store's own, but fused through the layers when the store is cached: the lines
        of ``fused_read_modify_write`` compiled into two functions. ``put`` reuses the key bytes ``get``
        just encoded (for immutable key types)."""
        fused = self.fused_read_modify_write()
        if fused is None:
            return self.get, self.put
        read, write, names = fused
        names = {name.replace("{p}", "_"): value for name, value in names.items()}
        names.update(_immutable=_IMMUTABLE_KEYS, _last=[None, None])  # the key get read last, its bytes
        source = "\n".join((
            "def get(k):",
            *(" " + line for line in read),
            " if type(k) in _immutable:",
            "  _last[0], _last[1] = k, kb",
            " return r",
            "def put(k, w):",
            " if k is _last[0] and k is not None and {p}store._open:",
            "  kb = _last[1]",
            " else:",
            *("  " + line for line in _KEY_LINES),
            *(" " + line for line in write),
        )).replace("{p}", "_")
        exec(compile(source, f"<read_modify_write of {self.name}>", "exec"), names)
        return names["get"], names["put"]

    def fused_read_modify_write(self) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Any]] | None:
        """A cached store's read and write of one key as lines of Python to inline where every record
        reads then writes its key (a fused aggregation): ``read`` sets ``kb`` to the bytes of key ``k``
        and ``r`` to its typed value (None if absent), looking the record cache up directly, else the
        layer below the cache (putting no clean entry: the write follows and puts the dirty one);
        ``write`` writes typed value ``w`` for ``kb`` into the cache with the task's record context. They
        behave as this store's ``get`` and ``put`` (metrics, errors, the serdes' full methods when an
        encoder refuses). Names are ``{p}``-prefixed; None when the store is not cached."""
        names = self._fused_names()
        return None if names is None else (self._read_below(_READ_LINES, names), _WRITE_LINES, names)

    def _read_below(self, lines: tuple[str, ...], names: dict[str, Any]) -> tuple[str, ...]:
        """``lines`` with the cache miss's read of the layer below inlined when the layers below the
        cache give it as lines (``fused_get``: the transaction buffer, then the store), their names
        added to ``names``; else ``lines`` (a call of the layer below's ``get``)."""
        fused_get = getattr(self.wrapped.wrapped, "fused_get", None)
        below = None if fused_get is None else fused_get()
        if below is None:
            return lines
        below_lines, below_names = prefixed(*below, "{p}b_")
        names.update(below_names)
        call = _CACHE_READ[2]
        return tuple(inlined for line in lines
                     for inlined in ((line,) if line != call else ("    " + b for b in below_lines)))

    def _fused_names(self) -> dict[str, Any] | None:
        """What the fused lines call, bound: the record cache's dict and write, the layer below it,
        the serdes; None when the store is not cached."""
        caching = self.wrapped
        if not isinstance(caching, CachingKeyValueStore) or not self._open:
            return None
        entries = caching.cache_entries
        return {
            "{p}store": self, "{p}metrics": self.metrics, "{p}raw_key_of": self._raw_key,
            "{p}key_encode": self._key_encode,
            "{p}lookup": entries.get, "{p}mark_used": entries.move_to_end, "{p}below": caching.wrapped.get,
            "{p}decode": self._value_decode, "{p}from_bytes": partial(self._value_de, self._topic),
            "{p}encode": self._value_encode, "{p}to_bytes": partial(self._value_ser, self._topic),
            "{p}put_dirty": caching.put_dirty_raw, "{p}context": caching.context,
        }

    def put_if_absent(self, key: Any, value: Any) -> Any:
        old = self.wrapped.put_if_absent(self._raw_key(key), self._value_ser(self._topic, value))
        self.metrics.put_if_absent += 1
        return self._value_de(self._topic, old)

    def put_all(self, entries: Sequence[tuple[Any, Any]]) -> None:
        self.wrapped.put_all([(self._raw_key(k), self._value_ser(self._topic, v)) for k, v in entries])
        self.metrics.put_all += 1

    def delete(self, key: Any) -> Any:
        old = self.wrapped.delete(self._raw_key(key))
        self.metrics.delete += 1
        return self._value_de(self._topic, old)

    def _typed(self, raw: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        topic, key_de, value_de = self._topic, self._key_de, self._value_de
        for key, value in raw:
            yield key_de(topic, key), value_de(topic, value)

    def _bound(self, key: Any) -> bytes | None:
        return None if key is None else self._raw_key(key)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        raw = self.wrapped.range(self._bound(from_key), self._bound(to_key))
        self.metrics.range += 1
        return self._typed(raw)

    def reverse_range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        raw = self.wrapped.reverse_range(self._bound(from_key), self._bound(to_key))
        self.metrics.range += 1
        return self._typed(raw)

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self.range(None, None)

    def reverse_all(self) -> Iterator[tuple[Any, Any]]:
        return self.reverse_range(None, None)

    def prefix_scan(self, prefix: Any, prefix_key_serializer: Any) -> Iterator[tuple[Any, Any]]:
        raw = self.wrapped.prefix_scan(prefix_key_serializer.serialize(self._topic, prefix))
        self.metrics.prefix_scan += 1
        return self._typed(raw)

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool) -> bool:
        """Deliver flushed cache entries to ``listener`` as typed (key, new, old, timestamp).

        Returns False when the store has no cache: the processor must then forward each update itself.
        """
        if not isinstance(self.wrapped, CachingKeyValueStore):
            return False
        topic = self._topic
        key_de, value_de = self._key_de, self._value_de
        key_decode, value_decode = self._key_decode, self._value_decode

        def typed(key: bytes, new: bytes | None, old: bytes | None, timestamp: int) -> None:
            try:
                typed_key = key_decode(key)
                typed_new = None if new is None else value_decode(new)
                typed_old = None if old is None else value_decode(old)
            except Exception:  # encoder_of's contract: the serdes' own methods decide
                typed_key = key_de(topic, key)
                typed_new, typed_old = value_de(topic, new), value_de(topic, old)
            listener(typed_key, typed_new, typed_old, timestamp)

        return self.wrapped.set_flush_listener(typed, send_old_values)


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
                        raw_value = value_encode(_new_tuple(ValueAndTimestamp, (value, timestamp)))
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


_new_tuple = tuple.__new__  # a ValueAndTimestamp without the NamedTuple's Python-level __new__ (hot path)

WindowedRecords = Iterator[tuple[Windowed[Any], Any]]


class _MeteredWindowed(MeteredStore):
    """What window and session stores share: a key serialized once per fetch-then-put, stream time."""

    def __init__(self, wrapped: Any, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> None:
        super().__init__(wrapped, key_serde, value_serde, "")
        self._last_key: Any = None
        self._last_key_bytes = b""
        self.num_puts = 0
        self.num_fetches = 0

    @property
    def observed_stream_time(self) -> int:
        """The largest record time the store has seen (window start; session end), kept across
        restarts and restores: processors recreated for a new run resume their stream time from it."""
        return self.wrapped.observed_stream_time

    def _key_bytes(self, key: Any) -> bytes:
        # an aggregation fetches then puts the same key: serialize it once
        if key is self._last_key:
            return self._last_key_bytes
        if key is None:
            raise ValueError(f"store {self.name!r}: keys must not be None")
        try:
            key_bytes = self._key_encode(key)
        except Exception:
            key_bytes = self._key_ser(self._topic, key)
        self._last_key_bytes, self._last_key = key_bytes, key
        return key_bytes


class MeteredWindowStore(WindowFetches, _MeteredWindowed):
    """Kafka's WindowStore: values per key and window start."""

    timestamped = False

    def __init__(self, wrapped: Any, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
                 window_size_ms: int) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self.window_size_ms = window_size_ms
        self._last_window: Window | None = None

    def _to_bytes(self, value: Any) -> bytes | None:
        return None if value is None else self._value_ser(self._topic, value)

    def _from_bytes(self, data: bytes | None) -> Any:
        return None if data is None else self._value_de(self._topic, data)

    def _plain(self, data: bytes | None) -> Any:
        """What the flush listener gets: the plain value."""
        return self._from_bytes(data)

    def _windowed(self, key: bytes, start: int) -> Windowed[Any]:
        try:
            typed = self._key_decode(key)
        except Exception:
            typed = self._key_de(self._topic, key)  # the serde's error
        window = self._last_window  # entries flush window by window: one (immutable) Window for each
        if window is None or window.start != start:
            window = self._last_window = Window(start, min(start + self.window_size_ms, MAX_TIMESTAMP))
        return new_windowed(typed, window)

    def put(self, key: Any, value: Any, window_start: int) -> None:
        """Store ``value`` for a window; None deletes."""
        self.num_puts += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        self.wrapped.put(key_bytes, self._to_bytes(value), window_start)

    def fetch(self, key: Any, window_start: int, *more: Any) -> Any:
        """The key's value in the window starting at ``window_start``; with more arguments Kafka's range
        forms (state/window/reads.py)."""
        if more:
            return self.fetch_more(key, window_start, more)
        self.num_fetches += 1
        key_bytes = self._last_key_bytes if key is self._last_key else self._key_bytes(key)
        return self._from_bytes(self.wrapped.fetch(key_bytes, window_start))

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """(window start, value) of the key's windows starting in [time_from, time_to], oldest first."""
        return self._values(self.wrapped.fetch_range(self._key_bytes(key), time_from, time_to, False))

    def backward_fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        return self._values(self.wrapped.fetch_range(self._key_bytes(key), time_from, time_to, True))

    def fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                        time_to: int) -> WindowedRecords:
        """(Windowed key, value) for keys in [key_from, key_to] (None: unbounded)."""
        return self._windows(self.wrapped.fetch_key_range(self._bound(key_from), self._bound(key_to),
                                                          time_from, time_to, False))

    def backward_fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                                 time_to: int) -> WindowedRecords:
        return self._windows(self.wrapped.fetch_key_range(self._bound(key_from), self._bound(key_to),
                                                          time_from, time_to, True))

    def fetch_all(self, time_from: int, time_to: int) -> WindowedRecords:
        return self._windows(self.wrapped.fetch_key_range(None, None, time_from, time_to, False))

    def all(self) -> WindowedRecords:
        return self._windows(self.wrapped.all(False))

    def backward_all(self) -> WindowedRecords:
        return self._windows(self.wrapped.all(True))

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool) -> bool:
        """With caching, flushed windows reach ``listener(Windowed key, new, old, timestamp)`` with plain
        values; returns False when the store is not cached (the processor forwards itself)."""
        set_listener = getattr(self.wrapped, "set_flush_listener", None)
        if set_listener is None:
            return False

        plain = self._plain

        def on_flush(key: bytes, start: int, new: bytes | None, old: bytes | None, timestamp: int) -> None:
            listener(self._windowed(key, start), plain(new), None if old is None else plain(old), timestamp)

        return set_listener(on_flush, send_old_values)

    def _bound(self, key: Any) -> bytes | None:
        return None if key is None else self._key_bytes(key)

    def _values(self, records: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, Any]]:
        self.num_fetches += 1
        for start, value in records:
            yield start, self._from_bytes(value)

    def _windows(self, records: Iterator[tuple[bytes, int, bytes]]) -> WindowedRecords:
        self.num_fetches += 1
        for key, start, value in records:
            yield self._windowed(key, start), self._from_bytes(value)


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
            return _new_tuple(ValueAndTimestamp, (self._plain_from(self._topic, plain), timestamp))
        return self._value_de(self._topic, data)  # None, or the serde's error

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


class MeteredSessionStore(_MeteredWindowed):
    """Kafka's SessionStore: one aggregate per key and session window."""

    def put(self, session: Windowed[Any], aggregate: Any) -> None:
        """Store the aggregate of a session; None removes the session."""
        self.num_puts += 1
        value = None if aggregate is None else self._value_ser(self._topic, aggregate)
        self.wrapped.put(self._key_bytes(session.key), session.window.start, session.window.end, value)

    def remove(self, session: Windowed[Any]) -> None:
        self.put(session, None)

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        self.num_fetches += 1
        data = self.wrapped.fetch_session(self._key_bytes(key), session_start, session_end)
        return None if data is None else self._value_de(self._topic, data)

    def find_sessions(self, key: Any, earliest_session_end: int,
                      latest_session_start: int) -> WindowedRecords:
        """Sessions of ``key`` ending at or after ``earliest_session_end`` and starting at or before
        ``latest_session_start``: those a record could merge with."""
        raw = self._key_bytes(key)
        return self._sessions(self.wrapped.find_sessions(raw, raw, earliest_session_end,
                                                         latest_session_start))

    def backward_find_sessions(self, key: Any, earliest_session_end: int,
                               latest_session_start: int) -> WindowedRecords:
        raw = self._key_bytes(key)
        return self._sessions(self.wrapped.find_sessions(raw, raw, earliest_session_end, latest_session_start,
                                                         True))

    def find_sessions_key_range(self, key_from: Any, key_to: Any, earliest_session_end: int,
                                latest_session_start: int) -> WindowedRecords:
        low = None if key_from is None else self._key_bytes(key_from)
        high = None if key_to is None else self._key_bytes(key_to)
        return self._sessions(self.wrapped.find_sessions(low, high, earliest_session_end,
                                                         latest_session_start))

    def fetch(self, key: Any) -> WindowedRecords:
        """Every session of ``key``."""
        return self.find_sessions(key, 0, MAX_TIMESTAMP)

    def backward_fetch(self, key: Any) -> WindowedRecords:
        return self.backward_find_sessions(key, 0, MAX_TIMESTAMP)

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool) -> bool:
        """With caching, flushed sessions reach ``listener(Windowed key, new, old, timestamp)`` (the
        timestamp is the session end); returns False when the store is not cached."""
        set_listener = getattr(self.wrapped, "set_flush_listener", None)
        if set_listener is None:
            return False

        def on_flush(key: bytes, start: int, end: int, new: bytes | None, old: bytes | None) -> None:
            window = Windowed(self._key_de(self._topic, key), SessionWindow(start, end))
            listener(window, self._value_or_none(new), self._value_or_none(old), end)

        return set_listener(on_flush, send_old_values)

    def _value_or_none(self, data: bytes | None) -> Any:
        return None if data is None else self._value_de(self._topic, data)

    def _sessions(self, records: Iterator[tuple[bytes, int, int, bytes]]) -> WindowedRecords:
        self.num_fetches += 1
        for key, start, end, value in records:
            yield Windowed(self._key_de(self._topic, key), SessionWindow(start, end)), \
                self._value_de(self._topic, value)


class MeteredVersionedKeyValueStore(MeteredStore):
    """The typed versioned store: ``put(key, value, timestamp)``, ``get(key)`` (the latest),
    ``get(key, as_of_timestamp)`` and ``delete(key, timestamp)``; reads give ``VersionedRecord``s."""

    @property
    def history_retention_ms(self) -> int:
        return self.wrapped.history_retention_ms

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        """Returns when the new version stops being valid: the next version's timestamp,
        ``PUT_RETURN_CODE_VALID_TO_UNDEFINED`` when it is the latest, ``PUT_RETURN_CODE_NOT_PUT`` when the
        timestamp is older than the history retention allows."""
        self.metrics.put += 1
        raw_value = None if value is None else self._value_ser(self._topic, value)
        return self.wrapped.put(self._raw_key(key), raw_value, check_timestamp(timestamp, self.name))

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord | None:
        """The latest version, or the one valid at ``as_of_timestamp``; None if there is no value then
        (or ``as_of_timestamp`` is older than the history retention allows)."""
        self.metrics.get += 1
        as_of = MAX_TIMESTAMP if as_of_timestamp is None else check_timestamp(as_of_timestamp, self.name)
        found = self.wrapped.get(self._raw_key(key), as_of)
        if found is None:
            return None
        raw_value, valid_from, valid_to = found
        return VersionedRecord(self._value_de(self._topic, raw_value), valid_from, valid_to)

    def delete(self, key: Any, timestamp: int) -> VersionedRecord | None:
        """Writes a tombstone at ``timestamp``; returns the version that was valid then, if any."""
        self.metrics.delete += 1
        old = self.get(key, timestamp)
        self.put(key, None, timestamp)
        return old

    def set_flush_listener(self, listener: Any, send_old_values: bool) -> bool:
        """No cache: the processor forwards each update itself."""
        return False
