"""The typed key-value store processors use, and its fused read-modify-write."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from strom.streams.internals.compiled import prefixed
from strom.streams.state.context import FlushListener, StateStore, StateStoreContext
from strom.streams.state.internals.caching import CachingKeyValueStore
from strom.streams.state.internals.metered.fused_lines import CACHE_READ, CACHE_WRITE, KEY_LINES, LOOKUP_LINES
from strom.streams.state.internals.metered.store import MeteredStore

_IMMUTABLE_KEYS = frozenset({str, bytes, int, float})
"""Key types whose bytes cannot change between an aggregation's read and its write of the same object."""
_READ_LINES = (
    *LOOKUP_LINES,
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
    *CACHE_WRITE,
)


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
            *("  " + line for line in KEY_LINES),
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
        call = CACHE_READ[2]
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
