"""KStream-GlobalKTable joins: a stream record looks up the global table's value for a key it
selects (``key_selector(key, value)``), so neither side is repartitioned or co-partitioned."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.streams.kstream.internals.functions import key_value_function
from strom.streams.kstream.internals.join_kind import JoinKind
from strom.streams.kstream.internals.table_lookup import value_at
from strom.streams.kstream.join_options import ValueJoiner, value_joiner
from strom.streams.kstream.options import Named
from strom.streams.processor.api import Processor, Record

if TYPE_CHECKING:
    from strom.streams.kstream.global_table import GlobalKTable
    from strom.streams.kstream.kstream import KStream


class KStreamGlobalKTableJoin(Processor):
    """Looks up ``key_selector(key, value)`` in the global store; the output keeps the stream key."""

    def __init__(self, store_name: str, key_selector: Callable[[Any, Any], Any], joiner: ValueJoiner,
                 left: bool) -> None:
        self.store_name = store_name
        self.key_selector = key_selector
        self.joiner = joiner
        self.left = left

    def init(self, context: Any) -> None:
        self.context = context
        self.lookup = value_at(context.get_state_store(self.store_name))

    def process(self, record: Record) -> None:
        if record.value is None:
            self.context.metrics.dropped_records += 1
            return
        table_key = self.key_selector(record.key, record.value)
        current = None if table_key is None else self.lookup(table_key, record.timestamp)
        if current is None and not self.left:
            if table_key is None:
                self.context.metrics.dropped_records += 1
            return
        other = None if current is None else current.value
        self.context.forward(record.with_value(self.joiner(record.key, record.value, other)))


def stream_global_table_join(stream: KStream, table: GlobalKTable, kind: JoinKind,
                             key_selector: Callable[..., Any], joiner: Callable[..., Any],
                             named: Named | None = None) -> KStream:
    """Each stream record looks up ``key_selector(key, value)`` in the global table's store; the stream
    needs no repartitioning, and the result keeps its key."""
    selector = key_value_function(key_selector, "KStream.join(GlobalKTable) key selector")
    fn = value_joiner(joiner, "KStream.join(GlobalKTable)")
    builder = stream.builder
    name = builder.node_name(named, f"KSTREAM-{kind.node_infix}-")
    store_name = table.spec.name
    builder.internal.add_processor(
        name, lambda: KStreamGlobalKTableJoin(store_name, selector, fn, kind is JoinKind.LEFT), stream.name)
    if kind is JoinKind.LEFT:  # its key selector may find a table key for a record with a null key
        builder.null_key_joins.add(name)
    return builder.new_stream(name, stream.key_serde, None, stream.repartition_required, stream.source_topics)
