"""KGroupedStream and KGroupedTable: the aggregations (count, reduce, aggregate) producing KTables."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.kafka.serdes import Serdes
from strom.streams.kstream.change import ChangeSerde
from strom.streams.kstream.internals import aggregate as ag
from strom.streams.kstream.internals.materialize import timestamped_store_builder
from strom.streams.kstream.internals.table import KTableProcessorSupplier
from strom.streams.kstream.kstream import KStream
from strom.streams.kstream.ktable import KTable
from strom.streams.kstream.options import Materialized, Named, named_and_materialized

if TYPE_CHECKING:
    from strom.streams.kstream.builder import InternalStreamsBuilder
    from strom.streams.kstream.windowed_kstream import AnyWindows, SessionWindowedKStream, TimeWindowedKStream


class _Grouped:
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

    def _aggregate_node(
        self,
        prefix: str,
        named: Named | None,
        materialized: Materialized | None,
        parent: str,
        factory: Callable[[KTableProcessorSupplier], Any],
        value_serde: Any,
        store_name: str,
    ) -> KTable:
        name = self.builder.node_name(named, prefix)
        supplier = KTableProcessorSupplier(factory, store_name)
        self.builder.internal.add_processor(name, supplier, parent)
        store = timestamped_store_builder(materialized, store_name, self.key_serde, value_serde)
        self.builder.internal.add_state_store(store, name)
        queryable = store_name if materialized is not None and materialized.store_name else None
        return KTable(
            self.builder,
            name,
            supplier,
            store.key_serde,
            store.value_serde,
            queryable,
            source_topics=self.source_topics,
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

    def _input(self, store_name: str) -> str:
        if not self.repartition_required:
            self.builder.require_copartitioned(self.source_topics)
            return self.name
        stream = KStream(self.builder, self.name, self.key_serde, self.value_serde, True, self.source_topics)
        repartitioned = self.builder.repartition(
            stream, self.grouped_name or store_name, self.key_serde, self.value_serde
        )
        return repartitioned.name

    def _build(
        self,
        prefix: str,
        named: Named | None,
        materialized: Materialized | None,
        factory: Callable[[KTableProcessorSupplier], Any],
        value_serde: Any,
    ) -> KTable:
        store_name = self.builder.store_name(materialized, prefix)
        parent = self._input(store_name)
        return self._aggregate_node(prefix, named, materialized, parent, factory, value_serde, store_name)

    def count(
        self, named: Named | Materialized | None = None, materialized: Materialized | Named | None = None
    ) -> KTable:
        """Records per key (null keys and values are skipped); values are Longs unless Materialized says."""
        named, materialized = named_and_materialized(named, materialized)
        value_serde = (materialized.value_serde if materialized else None) or Serdes.Long()
        return self._build(
            "KSTREAM-AGGREGATE-",
            named,
            materialized,
            lambda s: ag.KStreamAggregate(s, _zero, _increment),
            value_serde,
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """Combines the values of a key with ``reducer(aggregate, value)``; the first value starts it."""
        named, materialized = named_and_materialized(named, materialized)
        value_serde = (materialized.value_serde if materialized else None) or self.value_serde
        return self._build(
            "KSTREAM-REDUCE-", named, materialized, lambda s: ag.KStreamReduce(s, reducer), value_serde
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
        named, materialized = named_and_materialized(named, materialized)
        value_serde = materialized.value_serde if materialized else None
        return self._build(
            "KSTREAM-AGGREGATE-",
            named,
            materialized,
            lambda s: ag.KStreamAggregate(s, initializer, aggregator),
            value_serde,
        )

    def windowed_by(self, windows: AnyWindows) -> TimeWindowedKStream | SessionWindowedKStream:
        """Aggregate per window: TimeWindows (tumbling/hopping), SlidingWindows or SessionWindows."""
        from strom.streams.kstream.windowed_kstream import windowed_by

        return windowed_by(self, windows)


class KGroupedTable(_Grouped):
    """A re-keyed table; its updates always travel through a repartition topic."""

    def _build(
        self,
        prefix: str,
        named: Named | None,
        materialized: Materialized | None,
        factory: Callable[[KTableProcessorSupplier], Any],
        value_serde: Any,
    ) -> KTable:
        store_name = self.builder.store_name(materialized, prefix)
        base = self.grouped_name or store_name
        topic = f"{base}-repartition"
        b = self.builder.internal
        b.add_internal_topic(topic)
        change_serde = ChangeSerde(self.value_serde)
        b.add_processor(f"{base}-repartition-filter", _drop_null_keys(), self.name)
        b.add_sink(
            f"{base}-repartition-sink",
            topic,
            f"{base}-repartition-filter",
            key_serde=self.key_serde,
            value_serde=change_serde,
        )
        b.add_source(f"{base}-repartition-source", [topic], self.key_serde, change_serde)
        return self._aggregate_node(
            prefix, named, materialized, f"{base}-repartition-source", factory, value_serde, store_name
        )

    def count(
        self, named: Named | Materialized | None = None, materialized: Materialized | Named | None = None
    ) -> KTable:
        named, materialized = named_and_materialized(named, materialized)
        value_serde = (materialized.value_serde if materialized else None) or Serdes.Long()
        return self._build(
            "KTABLE-AGGREGATE-",
            named,
            materialized,
            lambda s: ag.KTableAggregate(s, _zero, _increment, _decrement),
            value_serde,
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
        named, materialized = named_and_materialized(named, materialized)
        value_serde = (materialized.value_serde if materialized else None) or self.value_serde
        return self._build(
            "KTABLE-REDUCE-",
            named,
            materialized,
            lambda s: ag.KTableReduce(s, adder, subtractor),
            value_serde,
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        named, materialized = named_and_materialized(named, materialized)
        value_serde = materialized.value_serde if materialized else None
        return self._build(
            "KTABLE-AGGREGATE-",
            named,
            materialized,
            lambda s: ag.KTableAggregate(s, initializer, adder, subtractor),
            value_serde,
        )


def _drop_null_keys() -> Callable[[], Any]:
    from strom.streams.kstream.internals.stateless import DropNullKeys

    return DropNullKeys


def _zero() -> int:
    return 0


def _increment(_key: Any, _value: Any, count: int) -> int:
    return count + 1


def _decrement(_key: Any, _value: Any, count: int) -> int:
    return count - 1
