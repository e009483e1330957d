"""The metered layer, outermost: turns typed keys and values into bytes and counts every operation.

Processors and interactive queries talk to this layer; everything below works on bytes. It also
adapts the caching layer's flush listener to typed values (seed 001: MeteredKeyValueStore.setFlushListener).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from strom.errors import InvalidStateStoreError, StromError
from strom.kafka.serdes import decoder_of, encoder_of
from strom.streams.state.caching import CachingKeyValueStore
from strom.streams.state.context import FlushListener, StateStore, StateStoreContext
from strom.streams.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde

_IMMUTABLE_KEYS = frozenset({str, bytes, int, float})
"""Key types whose bytes cannot change between an aggregation's read and its write of the same object."""


class NullKeyError(StromError, ValueError):
    """State stores do not accept None keys (Kafka Streams drops null-key records before stores)."""


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


class MeteredStore:
    """What every typed store shares: serdes bound at ``init``, key checks, metrics, open state."""

    def __init__(self, wrapped: Any, key_serde: Any, value_serde: Any, metrics_scope: str) -> None:
        self.wrapped = wrapped
        self._key_serde = key_serde
        self._value_serde = value_serde
        self.metrics_scope = metrics_scope
        self.metrics = StoreMetrics()
        self._open = False
        self._topic: str | None = None

    @property
    def name(self) -> str:
        return self.wrapped.name

    @property
    def persistent(self) -> bool:
        return self.wrapped.persistent

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
        behaving as this store's own, but fused through the layers when the store is cached. ``get``
        looks the raw key up in the record cache, else in the layer below the cache (putting no clean
        entry: the write follows and puts the dirty one); ``put`` reuses the key bytes ``get`` just
        encoded and writes the cache entry directly. One call per read and per write instead of four."""
        caching = self.wrapped
        if not isinstance(caching, CachingKeyValueStore) or not self._open:
            return self.get, self.put
        entries = caching.cache_entries
        lookup, mark_used = entries.get, entries.move_to_end
        below_get, put_dirty, context = caching.wrapped.get, caching.put_dirty_raw, caching.context
        metrics, topic = self.metrics, self._topic
        key_encode, value_encode, value_decode = self._key_encode, self._value_encode, self._value_decode
        value_ser, value_de, raw_key_of = self._value_ser, self._value_de, self._raw_key
        last: list[Any] = [None, None]  # the key get read last and its bytes

        def get(key: Any) -> Any:
            metrics.get += 1
            if key is None or not self._open:
                raw_key_of(key)  # raises the right error
            try:
                raw_key = key_encode(key)
            except Exception:
                raw_key = raw_key_of(key)
            if type(key) in _IMMUTABLE_KEYS:
                last[0], last[1] = key, raw_key
            entry = lookup(raw_key)
            if entry is not None:
                mark_used(raw_key)
                raw = entry.value
            else:
                raw = below_get(raw_key)
            if raw is None:
                return None
            try:
                return value_decode(raw)
            except Exception:
                return value_de(topic, raw)

        def put(key: Any, value: Any) -> None:
            metrics.put += 1
            if key is last[0] and key is not None and self._open:
                raw_key = last[1]
            else:
                if key is None or not self._open:
                    raw_key_of(key)
                try:
                    raw_key = key_encode(key)
                except Exception:
                    raw_key = raw_key_of(key)
            try:
                raw_value = None if value is None else value_encode(value)
            except Exception:
                raw_value = value_ser(topic, value)
            put_dirty(raw_key, raw_value, context.record_context)

        return get, put

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
        return ValueAndTimestampSerde(serde)

    def set_flush_listener(self, listener: FlushListener, send_old_values: bool) -> bool:
        """The listener gets plain values; the timestamp is the new value's (the entry's for a delete)."""

        def unwrapped(key: Any, new: ValueAndTimestamp[Any] | None, old: ValueAndTimestamp[Any] | None,
                      timestamp: int) -> None:
            listener(key, None if new is None else new.value, None if old is None else old.value,
                     timestamp if new is None else new.timestamp)

        return super().set_flush_listener(unwrapped, send_old_values)
