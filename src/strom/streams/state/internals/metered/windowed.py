"""What the metered window and session stores share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strom.kafka.serdes import Serde
from strom.streams.kstream.windows import Windowed
from strom.streams.state.internals.metered.store import MeteredStore

WindowedRecords = Iterator[tuple[Windowed[Any], Any]]


class MeteredWindowed(MeteredStore):
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

    def serialized_key(self, key: Any) -> bytes:
        """The key's bytes: windows emitted on close go out in the order of Kafka Streams' time-ordered
        stores, by time and then by these bytes."""
        return self._key_bytes(key)

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
