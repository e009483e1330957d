"""KStream-KTable joins (Kafka's KStreamKTableJoin): each stream record looks up the table's current
value for its key through the table's value getter (a versioned table: its value as of the stream
record's timestamp); table updates only change the table and never emit.

Stream records with a null value are dropped (counted in dropped_records). A null key is dropped by
the inner join; the left join joins it with None (KIP-962).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.streams.kstream.internals.join_kind import JoinKind
from strom.streams.kstream.internals.value_getter import ValueGetter
from strom.streams.kstream.join_options import Joined, ValueJoiner, value_joiner
from strom.streams.kstream.options import Named
from strom.streams.processor.api import Processor, Record
from strom.streams.processor.internals.fusion import FusedStep
from strom.streams.processor.internals.nodes import ContextFreeProcessor
from strom.streams.state.record_buffer import TimeOrderedRecordBuffer, record_buffer_builder
from strom.streams.state.stores import VersionedKeyValueStoreBuilder

if TYPE_CHECKING:
    from strom.streams.kstream.kstream import KStream
    from strom.streams.kstream.ktable import KTable

log = logging.getLogger(__name__)


class _StreamTableJoin(Processor):
    def __init__(self, table: ValueGetter, joiner: ValueJoiner, left: bool) -> None:
        self.table = table
        self.joiner = joiner
        self.left = left

    def init(self, context: Any) -> None:
        self.context = context
        self.forward = context.forward
        self.table.init(context)
        self.lookup = self.table.get

    def close(self) -> None:
        self.table.close()

    def process(self, record: Record) -> None:
        key = record.key
        if record.value is None or (key is None and not self.left):
            log.debug("Skipping stream-table join record with null key or value: %r", record)
            self.context.metrics.dropped_records += 1
            return
        current = None if key is None else self.lookup(key, record.timestamp)
        if current is None and not self.left:
            return
        other = None if current is None else current.value
        self.forward(Record(key, self.joiner(key, record.value, other), record.timestamp, record.raw_headers))


class KStreamKTableJoin(_StreamTableJoin, ContextFreeProcessor):
    """The plain join reads neither the record context nor writes a store: it may run context-free and
    fused into its source's chain."""

    def fused_step(self) -> FusedStep:
        return FusedStep((
            "if v is None or (k is None and not {p}left):",
            "    {p}process(_new_tuple(_Record, (k, v, t, h)))",  # dropped (or a left join's null key)
            "    return",
            "{p}current = None if k is None else {p}lookup(k, t)",
            "if {p}current is None and not {p}left:",
            "    return",
            "v = {p}joiner(k, v, None if {p}current is None else {p}current.value)",
        ), {"left": self.left, "process": self.process, "lookup": self.lookup, "joiner": self.joiner})


class BufferedKStreamKTableJoin(_StreamTableJoin):
    """A stream-table join with a grace period (KIP-923): each stream record waits in a time-ordered
    buffer until the observed stream time passes its timestamp + grace, then joins the versioned table
    as of its timestamp; records leave the buffer in timestamp order."""

    def __init__(self, table: ValueGetter, joiner: ValueJoiner, left: bool, buffer_name: str, grace_ms: int,
                 key_serde: Any, value_serde: Any) -> None:
        super().__init__(table, joiner, left)
        self.buffer_name = buffer_name
        self.grace_ms = grace_ms
        self.key_serde = key_serde
        self.value_serde = value_serde

    def init(self, context: Any) -> None:
        super().init(context)
        self.buffer = TimeOrderedRecordBuffer(context.get_state_store(self.buffer_name))
        key_serde = self.key_serde or context.key_serde()
        value_serde = self.value_serde or context.value_serde()
        self.serialize_key = key_serde.serializer().serialize
        self.serialize_value = value_serde.serializer().serialize
        self.deserialize_key = key_serde.deserializer().deserialize
        self.deserialize_value = value_serde.deserializer().deserialize

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            super().process(record)  # dropped, or joined with None by the left join: no lookup to wait for
            return
        stream_time = self.buffer.observe(record.timestamp)
        self.buffer.put(record.timestamp, self.serialize_key(None, record.key),
                        self.serialize_value(None, record.value), record.raw_headers)
        for timestamp, key, value, headers in self.buffer.evict_until(stream_time - self.grace_ms):
            super().process(Record(self.deserialize_key(None, key), self.deserialize_value(None, value),
                                   timestamp, headers))


def stream_table_join(stream: KStream, table: KTable, kind: JoinKind, joiner: Callable[..., Any],
                      joined: Joined | None = None) -> KStream:
    """Each stream record looks up the table's value for its key (the stream is repartitioned first
    when its key changed); with a grace period the records wait in a buffer first."""
    joined = joined or Joined()
    fn = value_joiner(joiner, f"KStream.{kind.value}")
    left = kind is JoinKind.LEFT
    builder = stream.builder
    name = builder.node_name(Named(joined.name), f"KSTREAM-{kind.node_infix}-")
    if stream.repartition_required:
        stream = builder.repartition(stream.name, f"{name}-left", joined.key_serde or stream.key_serde,
                                     joined.value_serde or stream.value_serde, optimizable=True)
    values = table.value_getter()
    if joined.grace_period_ms:
        for store_name in values.store_names:
            _check_grace_period(builder.internal.store_builders[store_name], joined.grace_period_ms)
        buffer_name = f"{name}-Buffer"
        serdes = joined.key_serde or stream.key_serde, joined.value_serde or stream.value_serde
        builder.internal.add_processor(name, lambda: BufferedKStreamKTableJoin(
            values.get(), fn, left, buffer_name, joined.grace_period_ms, *serdes), stream.name)
        builder.internal.add_state_store(record_buffer_builder(buffer_name), name)
    else:
        builder.internal.add_processor(name, lambda: KStreamKTableJoin(values.get(), fn, left), stream.name)
    if left:
        builder.null_key_joins.add(name)
    builder.internal.connect_processor_and_state_stores(name, *values.store_names)
    builder.internal.copartition(stream.source_topics | table.source_topics)
    return builder.new_stream(name, joined.key_serde or stream.key_serde, None,
                              source_topics=stream.source_topics | table.source_topics)


def _check_grace_period(table_store: Any, grace_ms: int) -> None:
    if not isinstance(table_store, VersionedKeyValueStoreBuilder):
        raise TopologyError(
            "A stream-table join with a grace period needs a versioned table; table store "
            f"{table_store.name!r} is not. Materialize the table with Materialized.as_("
            "Stores.persistent_versioned_key_value_store(name, history_retention)), or drop the grace "
            "period.")
    if table_store.history_retention_ms < grace_ms:
        raise TopologyError(
            f"The join's grace period ({grace_ms} ms) is longer than the history retention of table "
            f"store {table_store.name!r} ({table_store.history_retention_ms} ms): a record could wait for a "
            "version the table no longer keeps. Shorten the grace period or lengthen the history retention.")
