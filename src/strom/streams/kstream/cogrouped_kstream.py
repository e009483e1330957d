"""CogroupedKStream (Kafka's KIP-150): several grouped streams aggregated into one table.

``clicks.group_by_key().cogroup(add_click).cogroup(views.group_by_key(), add_view).aggregate(init)``
builds one store and, per input, an aggregate processor that updates it with that input's
aggregator; a merge node after them is the resulting table. All inputs must be co-partitioned
(an input whose key changed goes through its own repartition topic first). Records with a null
key or value are skipped, as in ``aggregate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.streams.kstream.internals import aggregate as ag
from strom.streams.kstream.internals import stateless as sl
from strom.streams.kstream.internals.table import KTableProcessorSupplier
from strom.streams.kstream.ktable import KTable
from strom.streams.kstream.options import Materialized, Named, named_and_materialized
from strom.streams.processor.api import Processor

if TYPE_CHECKING:
    from strom.streams.kstream.grouped import KGroupedStream
    from strom.streams.kstream.windowed_kstream import (
        AnyWindows,
        SessionWindowedCogroupedKStream,
        TimeWindowedCogroupedKStream,
    )

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
        merge, supplier, aggregators, source_topics = cogroup_nodes(
            self.inputs, store_name,
            lambda table, aggregator: ag.KStreamAggregate(table, initializer, aggregator), named)
        key_serde = (materialized.key_serde if materialized else None) or self.inputs[0][0].key_serde
        table = KTable(self.builder, merge, supplier, key_serde,
                       materialized.value_serde if materialized else None, None, source_topics=source_topics)
        table.materialize(materialized, store_name, *aggregators)
        return table

    def windowed_by(
        self, windows: AnyWindows
    ) -> TimeWindowedCogroupedKStream | SessionWindowedCogroupedKStream:
        """Aggregate per window: TimeWindows (tumbling, hopping), SlidingWindows or SessionWindows."""
        from strom.streams.kstream.windowed_kstream import cogrouped_windowed_by

        return cogrouped_windowed_by(self, windows)


def cogroup_nodes(
    inputs: Sequence[tuple[KGroupedStream, Aggregator]],
    store_name: str,
    make_processor: Callable[[KTableProcessorSupplier, Aggregator], Processor],
    named: Named | None,
) -> tuple[str, KTableProcessorSupplier, list[str], frozenset[str]]:
    """Per input, a node made by ``make_processor(table supplier, its aggregator)`` that updates store
    ``store_name`` (after a repartition topic, named by Grouped else ``<store>-<n>``, when the input's
    key changed); then a merge node, the table, whose supplier carries the store name and the
    old-values switch every input's processor reads. Returns the merge node, its supplier, the
    aggregate nodes (for the caller to connect to the store it builds) and the source topics
    (declared co-partitioned here)."""
    builder = inputs[0][0].builder
    internal = builder.internal
    table = KTableProcessorSupplier(lambda _: sl.PassThrough(), store_name)
    aggregators, source_topics = [], frozenset[str]()
    for position, (grouped, aggregator) in enumerate(inputs):
        stream = grouped.keyed_records(f"{store_name}-{position}")
        name = builder.node_name(None, "COGROUPKSTREAM-AGGREGATE-")
        internal.add_processor(name, _bind(make_processor, table, aggregator), stream.name)
        aggregators.append(name)
        source_topics |= stream.source_topics
    merge = builder.node_name(named, "COGROUPKSTREAM-MERGE-")
    internal.add_processor(merge, table, *aggregators)
    internal.copartition(source_topics)
    return merge, table, aggregators, source_topics


def _bind(make_processor: Callable[[KTableProcessorSupplier, Aggregator], Processor],
          table: KTableProcessorSupplier, aggregator: Aggregator) -> Callable[[], Processor]:
    return lambda: make_processor(table, aggregator)
