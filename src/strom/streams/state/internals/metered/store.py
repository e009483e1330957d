"""The metered layer every typed store kind builds on."""

from __future__ import annotations

from typing import Any

from strom.errors import InvalidStateStoreError, NullKeyError
from strom.kafka.serdes import decoder_of, encoder_of
from strom.streams.state.context import StateStore, StateStoreContext
from strom.streams.state.internals.layer import StoreLayer
from strom.streams.state.internals.metered.store_metrics import StoreMetrics


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
