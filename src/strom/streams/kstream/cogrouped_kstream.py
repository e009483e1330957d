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
from strom.streams.kstream.internals.aggregate import KStreamAggregate
from strom.streams.kstream.internals.cogroup import Aggregator, cogroup_nodes
from strom.streams.kstream.ktable import KTable
from strom.streams.kstream.options import Materialized, Named, named_and_materialized
from strom.streams.kstream.windowed_kstream import (
    AnyWindows,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
    cogrouped_windowed_by,
)

if TYPE_CHECKING:
    from strom.streams.kstream.grouped import KGroupedStream

__all__ = [
    "CogroupedKStream",
]


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
            lambda table, aggregator: KStreamAggregate(table, initializer, aggregator), named)
        key_serde = (materialized.key_serde if materialized else None) or self.inputs[0][0].key_serde
        table = KTable(self.builder, merge, supplier, key_serde,
                       materialized.value_serde if materialized else None, None, source_topics=source_topics)
        table.materialize(materialized, store_name, *aggregators)
        return table

    def windowed_by(
        self, windows: AnyWindows
    ) -> TimeWindowedCogroupedKStream | SessionWindowedCogroupedKStream:
        """Aggregate per window: TimeWindows (tumbling, hopping), SlidingWindows or SessionWindows."""
        return cogrouped_windowed_by(self, windows)
