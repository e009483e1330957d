"""Parameter objects of the DSL, named as Kafka Streams names them: Consumed, Produced, Grouped,
Materialized, Named, Repartitioned, Branched, Printed. Each is immutable; ``with_*`` return copies."""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from strom.errors import TopologyError
from strom.streams.processor.api import AutoOffsetReset
from strom.streams.processor.partitioner import StreamPartitioner

__all__ = [
    "Branched",
    "Consumed",
    "Grouped",
    "Materialized",
    "Named",
    "PartitionerLike",
    "Printed",
    "Produced",
    "Repartitioned",
    "StoreType",
    "StreamPartitioner",
]


def _check_name(name: str | None) -> str | None:
    if name is not None and (not name or not all(c.isalnum() or c in "._-" for c in name)):
        raise TopologyError(
            f"Name {name!r} is not valid: use letters, digits, '.', '_' and '-' "
            "(names become node, store and topic names)."
        )
    return name


def positive_int(value: int, what: str) -> int:
    """``value`` when it is a whole number above zero; else a TopologyError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TopologyError(f"{what} must be a positive int, got {value!r}.")
    return value


class _WithName:
    """``as_(name)`` / ``with_name(name)`` of the options that name a node, store or topic."""

    @classmethod
    def as_(cls, name: str) -> Self:
        return cls(name=_check_name(name))

    def with_name(self, name: str) -> Self:
        return dataclasses.replace(self, name=_check_name(name))


class _WithSerdes:
    """``with_key_serde`` / ``with_value_serde`` of the options that carry serdes."""

    def with_key_serde(self, serde: Any) -> Self:
        return dataclasses.replace(self, key_serde=serde)

    def with_value_serde(self, serde: Any) -> Self:
        return dataclasses.replace(self, value_serde=serde)


@dataclass(frozen=True)
class Named(_WithName):
    name: str | None = None


@dataclass(frozen=True)
class Consumed(_WithName, _WithSerdes):
    key_serde: Any = None
    value_serde: Any = None
    timestamp_extractor: Any = None
    name: str | None = None
    offset_reset_policy: AutoOffsetReset | None = None

    @staticmethod
    def with_(key_serde: Any = None, value_serde: Any = None, timestamp_extractor: Any = None) -> Consumed:
        return Consumed(key_serde, value_serde, timestamp_extractor)

    def with_timestamp_extractor(self, extractor: Any) -> Consumed:
        return dataclasses.replace(self, timestamp_extractor=extractor)

    def with_offset_reset_policy(self, policy: AutoOffsetReset) -> Consumed:
        """Where the source starts when the application has committed nothing for a partition yet
        (default: the ``auto.offset.reset`` config, ``earliest`` unless set)."""
        return dataclasses.replace(self, offset_reset_policy=policy)


PartitionerLike = StreamPartitioner | Callable[..., int | None]
"""A StreamPartitioner, or a function (topic, key, value[, num_partitions]) -> partition or None."""


@dataclass(frozen=True)
class Produced(_WithName, _WithSerdes):
    key_serde: Any = None
    value_serde: Any = None
    partitioner: PartitionerLike | None = None
    name: str | None = None

    @staticmethod
    def with_(
        key_serde: Any = None, value_serde: Any = None, partitioner: PartitionerLike | None = None
    ) -> Produced:
        return Produced(key_serde, value_serde, partitioner)

    def with_stream_partitioner(self, partitioner: PartitionerLike) -> Produced:
        return dataclasses.replace(self, partitioner=partitioner)


@dataclass(frozen=True)
class Grouped(_WithName, _WithSerdes):
    key_serde: Any = None
    value_serde: Any = None
    name: str | None = None

    @staticmethod
    def with_(key_serde: Any = None, value_serde: Any = None) -> Grouped:
        return Grouped(key_serde, value_serde)


@dataclass(frozen=True)
class Repartitioned(_WithName, _WithSerdes):
    key_serde: Any = None
    value_serde: Any = None
    name: str | None = None
    number_of_partitions: int | None = None
    partitioner: PartitionerLike | None = None

    @staticmethod
    def with_(key_serde: Any = None, value_serde: Any = None) -> Repartitioned:
        return Repartitioned(key_serde, value_serde)

    @staticmethod
    def with_number_of_partitions(n: int) -> Repartitioned:
        return Repartitioned().with_partitions(n)

    def with_partitions(self, n: int) -> Repartitioned:
        return dataclasses.replace(self, number_of_partitions=positive_int(n, "Repartitioned partitions"))

    def with_stream_partitioner(self, partitioner: PartitionerLike) -> Repartitioned:
        return dataclasses.replace(self, partitioner=partitioner)


class StoreType(enum.Enum):
    """The inner store of a DSL operator (Kafka's ``Materialized.StoreType``; the values are
    ``default.dsl.store``'s)."""

    ROCKS_DB = "rocksDB"
    IN_MEMORY = "in_memory"


@dataclass(frozen=True)
class Materialized(_WithSerdes):
    """How a DSL operator's store is built: name or supplier, serdes, caching, logging.

    ``Materialized.as_("name")`` makes the store queryable under that name; ``as_(supplier)`` picks the
    store (``Stores.in_memory_key_value_store(name)`` / ``Stores.persistent_key_value_store(name)``);
    ``as_(StoreType.IN_MEMORY)`` or ``with_store_type`` only its type (default: ``default.dsl.store``).
    """

    store_name: str | None = None
    store_supplier: Any = None
    key_serde: Any = None
    value_serde: Any = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    topic_config: Mapping[str, str] = field(default_factory=dict)
    retention_ms: int | None = None
    store_type: StoreType | None = None

    @staticmethod
    def as_(name_or_supplier: Any) -> Materialized:
        if isinstance(name_or_supplier, str):
            return Materialized(store_name=_check_name(name_or_supplier))
        if isinstance(name_or_supplier, StoreType):
            return Materialized(store_type=name_or_supplier)
        name = getattr(name_or_supplier, "name", None)
        if not isinstance(name, str):
            raise TopologyError(
                f"Materialized.as_ needs a store name or a store supplier, got {name_or_supplier!r}."
            )
        return Materialized(store_name=name, store_supplier=name_or_supplier)

    @staticmethod
    def with_(key_serde: Any = None, value_serde: Any = None) -> Materialized:
        return Materialized(key_serde=key_serde, value_serde=value_serde)

    def with_store_type(self, store_type: StoreType) -> Materialized:
        if not isinstance(store_type, StoreType):
            raise TopologyError(f"with_store_type needs StoreType.ROCKS_DB or StoreType.IN_MEMORY, got "
                                f"{store_type!r}.")
        return dataclasses.replace(self, store_type=store_type)

    def with_caching_enabled(self) -> Materialized:
        return dataclasses.replace(self, caching_enabled=True)

    def with_caching_disabled(self) -> Materialized:
        return dataclasses.replace(self, caching_enabled=False)

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> Materialized:
        return dataclasses.replace(self, logging_enabled=True, topic_config=dict(config or {}))

    def with_logging_disabled(self) -> Materialized:
        return dataclasses.replace(self, logging_enabled=False, topic_config={})

    def with_retention(self, retention_ms: int) -> Materialized:
        return dataclasses.replace(self, retention_ms=retention_ms)


@dataclass(frozen=True)
class Branched:
    """One branch of ``KStream.split()``: its name suffix and an optional function or consumer of the
    branch stream (a function's result becomes the branch's value in the result map)."""

    name: str | None = None
    chain: Callable[[Any], Any] | None = None
    consume: bool = False

    @staticmethod
    def as_(name: str) -> Branched:
        return Branched(_check_name(name))

    @staticmethod
    def with_function(chain: Callable[[Any], Any], name: str | None = None) -> Branched:
        return Branched(_check_name(name), chain)

    @staticmethod
    def with_consumer(chain: Callable[[Any], None], name: str | None = None) -> Branched:
        return Branched(_check_name(name), chain, consume=True)


def named_and_materialized(first: Any, second: Any) -> tuple[Named | None, Materialized | None]:
    """Kafka's overloads ``op()``, ``op(Named)``, ``op(Materialized)``, ``op(Named, Materialized)``:
    the two optional arguments of an operator may come in either position."""
    named: Named | None = None
    materialized: Materialized | None = None
    for option in (first, second):
        if option is None:
            continue
        if isinstance(option, Named) and named is None:
            named = option
        elif isinstance(option, Materialized) and materialized is None:
            materialized = option
        else:
            raise TopologyError(
                f"Expected at most one Named and one Materialized, got {first!r} and {second!r}."
            )
    return named, materialized


@dataclass(frozen=True)
class Printed(_WithName):
    """Where ``KStream.print`` writes: a line ``[label]: key, value`` per record, for debugging.

    ``to_file`` empties the file when the topology is built, as Kafka Streams does; every task then
    appends to it, line by line, so the tasks of one application (even in separate Spark workers)
    share one file. The label defaults to the print node's name.
    """

    path: str | None = None
    label: str | None = None
    mapper: Callable[[Any, Any], Any] | None = None
    name: str | None = None

    @staticmethod
    def to_sys_out() -> Printed:
        return Printed()

    @staticmethod
    def to_file(path: str | os.PathLike[str]) -> Printed:
        path = os.fspath(path)
        if not path:
            raise TopologyError("Printed.to_file needs a file path, got an empty one.")
        try:
            with open(path, "w", encoding="utf-8"):
                pass
        except OSError as exc:
            raise TopologyError(f"Printed.to_file cannot write to {path!r}: {exc}. "
                                "Give a path in a directory that exists and is writable.") from exc
        return Printed(path=path)

    def with_label(self, label: str) -> Printed:
        return dataclasses.replace(self, label=label)

    def with_key_value_mapper(self, mapper: Callable[[Any, Any], Any]) -> Printed:
        """``mapper(key, value)`` returns what follows the label (default ``f"{key}, {value}"``)."""
        return dataclasses.replace(self, mapper=mapper)
