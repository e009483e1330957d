"""The nodes of a cogrouped aggregation (KIP-150): one aggregate node per input updating a shared store,
and a merge node that is the resulting table; windowed or not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from strom.streams.kstream.internals.stateless import PassThrough
from strom.streams.kstream.internals.table import KTableProcessorSupplier
from strom.streams.kstream.options import Named
from strom.streams.processor.api import Processor

if TYPE_CHECKING:
    from strom.streams.kstream.grouped import KGroupedStream

Aggregator = Callable[[Any, Any, Any], Any]


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
    table = KTableProcessorSupplier(lambda _: PassThrough(), store_name)
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
