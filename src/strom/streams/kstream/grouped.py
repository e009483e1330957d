"""KGroupedStream and KGroupedTable: the aggregations (count, reduce, aggregate) producing KTables."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.kafka.serdes import Serdes
from strom.streams.kstream.change import ChangeSerde
from strom.streams.kstream.cogrouped_kstream import CogroupedKStream
from strom.streams.kstream.internals.aggregate import (
    KStreamAggregate,
    KStreamReduce,
    KTableAggregate,
    KTableReduce,
)
from strom.streams.kstream.internals.functions import count_aggregator, count_initializer, count_subtractor
from strom.streams.kstream.internals.table import KTableProcessorSupplier
from strom.streams.kstream.ktable import KTable, materialized_table
from strom.streams.kstream.options import Materialized, Named, named_and_materialized
from strom.streams.kstream.windowed_kstream import (
    AnyWindows,
    SessionWindowedKStream,
    TimeWindowedKStream,
    windowed_by,
)

if TYPE_CHECKING:
    from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder
    from strom.streams.kstream.kstream import KStream

__all__ = [
    "KGroupedStream",
    "KGroupedTable",
]


class _Grouped(ABC):
    """What both grouped kinds share: an aggregation is a table processor with a timestamped store,
    fed by ``aggregation_input`` (the grouped node, or a repartition topic in front of it)."""

    def __init__(
        self,
        builder: InternalStreamsBuilder,
        name: str,
        key_serde: Any,
        value_serde: Any,
        grouped_name: str | None,
        source_topics: frozenset[str],
    ) -> None:
        self.builder = builder
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.grouped_name = grouped_name
        self.source_topics = source_topics

    @abstractmethod
    def aggregation_input(self, store_name: str) -> str:
        """The node the aggregation reads from; ``store_name`` names a repartition topic if one is needed."""

    def _repartition(self, store_name: str, value_serde: Any, optimizable: bool = False) -> KStream:
        """Writes the grouped records to ``<Grouped name, else store name>-repartition``; returns the
        stream reading them back."""
        base = self.grouped_name or store_name
        return self.builder.repartition(self.name, base, self.key_serde, value_serde, optimizable=optimizable)

    def _build(
        self,
        prefix: str,
        named: Named | Materialized | None,
        materialized: Materialized | Named | None,
        factory: Callable[[KTableProcessorSupplier], Any],
        value_serde: Any,
    ) -> KTable:
        """``value_serde`` is the result's serde unless the Materialized gives one."""
        named, materialized = named_and_materialized(named, materialized)
        store_name = self.builder.store_name(materialized, prefix)
        parent = self.aggregation_input(store_name)
        name = self.builder.node_name(named, prefix)
        return materialized_table(
            self.builder,
            name,
            parent,
            factory,
            materialized,
            store_name,
            self.key_serde,
            value_serde,
            source_topics=self.source_topics,
            versioned_ok=True,
        )


class KGroupedStream(_Grouped):
    """A stream grouped by key. When the key was changed upstream, aggregating reads through a
    repartition topic ``<application.id>-<name>-repartition`` (name: Grouped, else the store's)."""

    def __init__(
        self,
        builder: InternalStreamsBuilder,
        name: str,
        key_serde: Any,
        value_serde: Any,
        repartition_required: bool,
        grouped_name: str | None,
        source_topics: frozenset[str],
    ) -> None:
        super().__init__(builder, name, key_serde, value_serde, grouped_name, source_topics)
        self.repartition_required = repartition_required

    def aggregation_input(self, store_name: str) -> str:
        if not self.repartition_required:
            self.builder.require_copartitioned(self.source_topics)
        return self.keyed_records(store_name).name

    def keyed_records(self, store_name: str) -> KStream:
        """The records partitioned by their key: this stream, or, when the key changed upstream, the
        source of a repartition topic in front of it (named by Grouped, else ``store_name``)."""
        if not self.repartition_required:
            return self.builder.new_stream(self.name, self.key_serde, self.value_serde,
                                           source_topics=self.source_topics)
        return self._repartition(store_name, self.value_serde, optimizable=True)

    def count(
        self, named: Named | Materialized | None = None, materialized: Materialized | Named | None = None
    ) -> KTable:
        """Records per key (null keys and values are skipped); values are Longs unless Materialized says."""
        return self._build(
            "KSTREAM-AGGREGATE-",
            named,
            materialized,
            lambda s: KStreamAggregate(s, count_initializer, count_aggregator),
            Serdes.Long(),
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """Combines the values of a key with ``reducer(aggregate, value)``; the first value starts it."""
        return self._build(
            "KSTREAM-REDUCE-", named, materialized, lambda s: KStreamReduce(s, reducer), self.value_serde
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` returns the new aggregate; give the aggregate's serde with
        ``Materialized.with_value_serde`` (else default.value.serde)."""
        return self._build(
            "KSTREAM-AGGREGATE-",
            named,
            materialized,
            lambda s: KStreamAggregate(s, initializer, aggregator),
            None,
        )

    def cogroup(self, aggregator: Callable[[Any, Any, Any], Any]) -> CogroupedKStream:
        """Starts a cogrouped aggregation: this stream's records update it with ``aggregator(key,
        value, aggregate)``; ``.cogroup(other_grouped, its_aggregator)`` adds more inputs."""
        return CogroupedKStream(self, aggregator)

    def windowed_by(self, windows: AnyWindows) -> TimeWindowedKStream | SessionWindowedKStream:
        """Aggregate per window: TimeWindows (tumbling/hopping), SlidingWindows or SessionWindows."""
        return windowed_by(self, windows)


class KGroupedTable(_Grouped):
    """A re-keyed table; its updates always travel through a repartition topic, as Change records."""

    def aggregation_input(self, store_name: str) -> str:
        return self._repartition(store_name, ChangeSerde(self.value_serde)).name

    def count(
        self, named: Named | Materialized | None = None, materialized: Materialized | Named | None = None
    ) -> KTable:
        """Rows per new key: a row adds one to its key's count, the row it replaces subtracts one."""
        return self._build(
            "KTABLE-AGGREGATE-",
            named,
            materialized,
            lambda s: KTableAggregate(s, count_initializer, count_aggregator, count_subtractor),
            Serdes.Long(),
        )

    def reduce(
        self,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """Adds each new value with ``adder(aggregate, value)`` and removes the value it replaces with
        ``subtractor(aggregate, value)``."""
        return self._build(
            "KTABLE-REDUCE-",
            named,
            materialized,
            lambda s: KTableReduce(s, adder, subtractor),
            self.value_serde,
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """``adder(key, value, aggregate)`` takes in each new value, ``subtractor(key, value, aggregate)``
        takes out the value it replaces; the aggregate's serde comes from Materialized."""
        return self._build(
            "KTABLE-AGGREGATE-",
            named,
            materialized,
            lambda s: KTableAggregate(s, initializer, adder, subtractor),
            None,
        )

