"""CogroupedKStream (Kafka's KIP-150): several grouped streams aggregated into one table.

``clicks.group_by_key().cogroup(add_click).cogroup(views.group_by_key(), add_view).aggregate(init)``
builds one store and, per input, an aggregate processor that updates it with that input's
aggregator; a merge node after them is the resulting table. All inputs must be co-partitioned
(an input whose key changed goes through its own repartition topic first). Records with a null
key or value are skipped, as in ``aggregate``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.streams.kstream.internals import aggregate as ag
from strom.streams.kstream.internals import stateless as sl
from strom.streams.kstream.internals.table import KTableProcessorSupplier
from strom.streams.kstream.kstream import KStream
from strom.streams.kstream.ktable import KTable
from strom.streams.kstream.options import Materialized, Named, named_and_materialized

if TYPE_CHECKING:
    from strom.streams.kstream.grouped import KGroupedStream

Aggregator = Callable[[Any, Any, Any], Any]


class CogroupedKStream:
    """Made by ``KGroupedStream.cogroup(aggregator)``; add inputs with ``cogroup``, then ``aggregate``."""

    def __init__(self, first: KGroupedStream, aggregator: Aggregator) -> None:
        self.builder = first.builder
        self.inputs: list[tuple[KGroupedStream, Aggregator]] = []
        self.cogroup(first, aggregator)

    def cogroup(self, grouped: KGroupedStream, aggregator: Aggregator) -> CogroupedKStream:
        """Adds ``grouped``: its records update the shared aggregate with ``aggregator(key, value, agg)``."""
        if grouped.builder is not self.builder:
            raise TopologyError("Cannot cogroup streams of different StreamsBuilders.")
        if any(grouped is other for other, _ in self.inputs):
            raise TopologyError("This grouped stream is cogrouped already; each input may appear once.")
        if not callable(aggregator):
            raise TopologyError(f"cogroup needs an aggregator (key, value, aggregate) -> aggregate, "
                                f"got {aggregator!r}.")
        self.inputs.append((grouped, aggregator))
        return self

    def aggregate(
        self,
        initializer: Callable[[], Any],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """The table of each key's aggregate, starting from ``initializer()``; give its serde with
        ``Materialized.with_value_serde`` (else default.value.serde)."""
        named, materialized = named_and_materialized(named, materialized)
        store_name = self.builder.store_name(materialized, "COGROUPKSTREAM-AGGREGATE-")
        table_supplier = KTableProcessorSupplier(lambda _: sl.PassThrough(), None)
        internal = self.builder.internal
        aggregators, source_topics = [], frozenset[str]()
        for position, (grouped, aggregator) in enumerate(self.inputs):
            stream = self._input(grouped, f"{store_name}-{position}")
            name = self.builder.node_name(None, "COGROUPKSTREAM-AGGREGATE-")
            internal.add_processor(name, _aggregate_supplier(table_supplier, initializer, aggregator),
                                   stream.name)
            aggregators.append(name)
            source_topics |= stream.source_topics
        merge = self.builder.node_name(named, "COGROUPKSTREAM-MERGE-")
        internal.add_processor(merge, table_supplier, *aggregators)
        key_serde = (materialized.key_serde if materialized else None) or self.inputs[0][0].key_serde
        table = KTable(self.builder, merge, table_supplier, key_serde,
                       materialized.value_serde if materialized else None, None,
                       source_topics=source_topics)
        table._materialize(materialized, store_name)
        for name in aggregators:
            internal.connect_processor_and_state_stores(name, store_name)
        internal.copartition(source_topics)
        return table

    def _input(self, grouped: KGroupedStream, base: str) -> KStream:
        """The grouped records, through a repartition topic (named by Grouped, else ``base``) when
        their key changed upstream."""
        stream = KStream(self.builder, grouped.name, grouped.key_serde, grouped.value_serde,
                         grouped.repartition_required, grouped.source_topics)
        if not grouped.repartition_required:
            return stream
        return self.builder.repartition(stream, grouped.grouped_name or base, grouped.key_serde,
                                        grouped.value_serde)


def _aggregate_supplier(table: KTableProcessorSupplier, initializer: Callable[[], Any],
                        aggregator: Aggregator) -> Callable[[], ag.KStreamAggregate]:
    """Each input's processor reads the store name and old-values switch of the one table."""
    return lambda: ag.KStreamAggregate(table, initializer, aggregator)
