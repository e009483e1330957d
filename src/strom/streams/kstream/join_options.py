"""Parameter objects of joins, named as Kafka Streams names them: Joined (stream-table) and
StreamJoined (stream-stream). Immutable; ``with_*`` return copies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.errors import TopologyError
from strom.streams.kstream.internals.functions import required_positional
from strom.streams.kstream.options import StoreType
from strom.streams.kstream.windows import Duration, to_millis
from strom.streams.state.window.builders import WindowBytesStoreSupplier

__all__ = [
    "Joined",
    "Joiner",
    "StreamJoined",
    "TableJoined",
    "ValueJoiner",
]


@dataclass(frozen=True)
class Joined:
    """Serdes and name of a stream-table join. The serdes are the stream's key and value, used when
    the stream must be repartitioned first; the table is read through its own store and serdes."""

    key_serde: Any = None
    value_serde: Any = None
    name: str | None = None
    grace_period_ms: int = 0

    @staticmethod
    def with_(key_serde: Any = None, value_serde: Any = None) -> Joined:
        return Joined(key_serde, value_serde)

    @staticmethod
    def as_(name: str) -> Joined:
        return Joined(name=name)

    def with_name(self, name: str) -> Joined:
        return dataclasses.replace(self, name=name)

    def with_grace_period(self, grace: Duration) -> Joined:
        """Stream records wait until stream time passes their timestamp + ``grace`` before they join, so
        late table updates within it are seen (KIP-923; the table must be versioned; 0: no wait)."""
        return dataclasses.replace(self, grace_period_ms=to_millis(grace, "Joined grace period"))


@dataclass(frozen=True)
class StreamJoined:
    """Serdes, name and store names of a stream-stream join (each side is buffered in a window store)."""

    key_serde: Any = None
    value_serde: Any = None
    other_value_serde: Any = None
    name: str | None = None
    store_name: str | None = None
    logging_enabled: bool = True
    dsl_store_suppliers: StoreType | None = None
    this_store_supplier: WindowBytesStoreSupplier | None = None
    other_store_supplier: WindowBytesStoreSupplier | None = None

    @staticmethod
    def with_(key_serde: Any = None, value_serde: Any = None, other_value_serde: Any = None) -> StreamJoined:
        return StreamJoined(key_serde, value_serde, other_value_serde)

    @staticmethod
    def as_(store_name: str) -> StreamJoined:
        return StreamJoined(store_name=store_name)

    def with_name(self, name: str) -> StreamJoined:
        return dataclasses.replace(self, name=name)

    def with_store_name(self, store_name: str) -> StreamJoined:
        return dataclasses.replace(self, store_name=store_name)

    def with_key_serde(self, serde: Any) -> StreamJoined:
        return dataclasses.replace(self, key_serde=serde)

    def with_value_serde(self, serde: Any) -> StreamJoined:
        return dataclasses.replace(self, value_serde=serde)

    def with_other_value_serde(self, serde: Any) -> StreamJoined:
        return dataclasses.replace(self, other_value_serde=serde)

    def with_logging_disabled(self) -> StreamJoined:
        return dataclasses.replace(self, logging_enabled=False)

    def with_in_memory_stores(self) -> StreamJoined:
        """Buffer both sides in memory instead of RocksDB (restored from the changelogs)."""
        return self.with_dsl_store_suppliers(StoreType.IN_MEMORY)

    def with_dsl_store_suppliers(self, store_type: StoreType) -> StreamJoined:
        """The kind of store both sides (and the outer join's shared store) are buffered in, instead of
        ``default.dsl.store`` (Kafka's withDslStoreSuppliers; strom's built-in suppliers are a StoreType)."""
        if not isinstance(store_type, StoreType):
            raise TopologyError(f"with_dsl_store_suppliers takes a StoreType (ROCKS_DB or IN_MEMORY), got "
                                f"{store_type!r}.")
        return dataclasses.replace(self, dsl_store_suppliers=store_type)

    def with_this_store_supplier(self, supplier: WindowBytesStoreSupplier) -> StreamJoined:
        """The window store this (left) side is buffered in; it must retain duplicates and match the join
        window (size before + after, retention size + grace), as in Kafka."""
        return dataclasses.replace(self, this_store_supplier=supplier)

    def with_other_store_supplier(self, supplier: WindowBytesStoreSupplier) -> StreamJoined:
        """The window store the other (right) side is buffered in (see ``with_this_store_supplier``)."""
        return dataclasses.replace(self, other_store_supplier=supplier)


@dataclass(frozen=True)
class TableJoined:
    """Name and partitioners of a foreign-key join (Kafka's TableJoined): ``partitioner`` is how this
    (left) table's topic is partitioned, ``other_partitioner`` the other (right) table's; the join's
    internal topics are partitioned the same way, so its subscriptions and responses reach the tasks that
    own those keys. Either a StreamPartitioner or a function, as for ``Produced``; None: the default."""

    partitioner: Any = None
    other_partitioner: Any = None
    name: str | None = None

    @staticmethod
    def with_(partitioner: Any = None, other_partitioner: Any = None) -> TableJoined:
        return TableJoined(partitioner, other_partitioner)

    @staticmethod
    def as_(name: str) -> TableJoined:
        return TableJoined(name=name)

    def with_name(self, name: str) -> TableJoined:
        return dataclasses.replace(self, name=name)

    def with_partitioner(self, partitioner: Any) -> TableJoined:
        return dataclasses.replace(self, partitioner=partitioner)

    def with_other_partitioner(self, partitioner: Any) -> TableJoined:
        return dataclasses.replace(self, other_partitioner=partitioner)


Joiner = Callable[..., Any]
"""What a user gives a join: ValueJoiner ``(left, right)`` or ValueJoinerWithKey ``(key, left, right)``."""

ValueJoiner = Callable[[Any, Any, Any], Any]
"""A joiner as the join processors call it, ``(key, left, right)`` (``value_joiner`` adapts a Joiner)."""


def value_joiner(joiner: Joiner, operator: str) -> ValueJoiner:
    """``joiner(left, right)`` or ``joiner(key, left, right)`` (Kafka's ValueJoinerWithKey)."""
    if not callable(joiner):
        raise TopologyError(f"{operator} needs a joiner function, got {joiner!r}.")
    arity = required_positional(joiner)
    if arity == 3:
        return joiner
    if arity in (2, None):
        return lambda _key, left, right: joiner(left, right)
    raise TopologyError(f"The joiner given to {operator} must take (left, right) or (key, left, right); "
                        f"it takes {arity} arguments.")
