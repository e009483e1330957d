"""The DSL's joins, wired into the topology: ``KStream.join/left_join/outer_join`` with a KStream
(windowed), a KTable or a GlobalKTable, and ``KTable.join/left_join/outer_join`` with a KTable.

Node names follow Kafka Streams (``KSTREAM-JOIN-``, ``KTABLE-JOINTHIS-``, ``KTABLE-MERGE-``...).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.streams.kstream.internals.dsl_stores import dsl_store_builder, key_value_supplier
from strom.streams.kstream.internals.functions import value_function
from strom.streams.kstream.internals.stream_table_join import BufferedKStreamKTableJoin, KStreamKTableJoin
from strom.streams.kstream.internals.table import KTableProcessorSupplier
from strom.streams.kstream.internals.table_lookup import ensure_materialized
from strom.streams.kstream.internals.table_table_join import (
    KTableKTableJoinMerger,
    KTableKTableJoinSide,
    SideMode,
)
from strom.streams.kstream.join_options import Joined, TableJoined, value_joiner
from strom.streams.kstream.options import Materialized, Named
from strom.streams.state.record_buffer import record_buffer_builder
from strom.streams.state.stores import VersionedKeyValueStoreBuilder

if TYPE_CHECKING:
    from strom.streams.kstream.builder import InternalStreamsBuilder
    from strom.streams.kstream.kstream import KStream
    from strom.streams.kstream.ktable import KTable

INNER, LEFT, OUTER = "inner", "left", "outer"


def stream_join(stream: KStream, other: Any, kind: str, *args: Any, **kwargs: Any) -> KStream:
    """``KStream.join``/``left_join``/``outer_join``: dispatch on what ``other`` is."""
    from strom.streams.kstream.kstream import KStream
    from strom.streams.kstream.ktable import KTable

    if isinstance(other, KStream):
        from strom.streams.kstream.internals.stream_stream_join import stream_stream_join

        return stream_stream_join(stream, other, kind, *args, **kwargs)
    if kind == OUTER:
        raise TopologyError("outer_join of a KStream needs another KStream; KStream-KTable and "
                            "KStream-GlobalKTable joins are inner or left.")
    if isinstance(other, KTable):
        return stream_table_join(stream, other, kind, *args, **kwargs)
    from strom.streams.kstream.global_table import GlobalKTable, stream_global_table_join

    if isinstance(other, GlobalKTable):
        return stream_global_table_join(stream, other, kind, *args, **kwargs)
    raise TopologyError(f"A KStream joins a KStream, a KTable or a GlobalKTable, not {other!r}.")


def stream_table_join(stream: KStream, table: KTable, kind: str, joiner: Callable[..., Any],
                      joined: Joined | None = None) -> KStream:
    """Each stream record looks up the table's value for its key (the stream is repartitioned first
    when its key changed)."""
    from strom.streams.kstream.kstream import KStream

    joined = joined or Joined()
    fn = value_joiner(joiner, f"KStream.{'join' if kind == INNER else 'left_join'}")
    builder = stream.builder
    name = builder.node_name(Named(joined.name), "KSTREAM-JOIN-" if kind == INNER else "KSTREAM-LEFTJOIN-")
    if stream.repartition_required:
        stream = builder.repartition(stream, f"{name}-left", joined.key_serde or stream.key_serde,
                                     joined.value_serde or stream.value_serde)
    store_name = ensure_materialized(table)
    if joined.grace_period_ms:
        _check_grace_period(builder.internal.store_builders[store_name], joined.grace_period_ms)
        buffer_name = f"{name}-Buffer"
        serdes = joined.key_serde or stream.key_serde, joined.value_serde or stream.value_serde
        builder.internal.add_processor(name, lambda: BufferedKStreamKTableJoin(
            store_name, fn, kind == LEFT, buffer_name, joined.grace_period_ms, *serdes), stream.name)
        builder.internal.add_state_store(record_buffer_builder(buffer_name), name)
    else:
        builder.internal.add_processor(name, lambda: KStreamKTableJoin(store_name, fn, kind == LEFT),
                                       stream.name)
    builder.internal.connect_processor_and_state_stores(name, store_name)
    builder.internal.copartition(stream.source_topics | table.source_topics)
    return KStream(builder, name, joined.key_serde or stream.key_serde, None, False,
                   stream.source_topics | table.source_topics)


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


_TABLE_MODES = {INNER: (SideMode.INNER, SideMode.INNER, "KTABLE-JOIN"),
                LEFT: (SideMode.PRESERVE_THIS, SideMode.PRESERVE_OTHER, "KTABLE-LEFTJOIN"),
                OUTER: (SideMode.OUTER, SideMode.OUTER, "KTABLE-OUTERJOIN")}


def table_table_join(left: KTable, right: KTable, kind: str, joiner: Callable[..., Any],
                     named: Named | None = None, materialized: Materialized | None = None) -> KTable:
    """A table of ``joiner(left value, right value)`` per key, updated from both sides."""
    from strom.streams.kstream.internals.materialize import table_store_builder
    from strom.streams.kstream.ktable import KTable

    if right.builder is not left.builder:
        raise TopologyError("Cannot join tables of different StreamsBuilders.")
    fn = value_joiner(joiner, f"KTable.{kind}_join" if kind != INNER else "KTable.join")
    left_mode, right_mode, prefix = _TABLE_MODES[kind]
    builder = left.builder
    left.enable_send_old_values()
    right.enable_send_old_values()
    left_store, right_store = ensure_materialized(left), ensure_materialized(right)
    base = named.name if named is not None and named.name else None
    this_name = f"{base}-join-this" if base else builder.node_name(None, f"{prefix}THIS-")
    other_name = f"{base}-join-other" if base else builder.node_name(None, f"{prefix}OTHER-")
    merge_name = base or builder.node_name(None, "KTABLE-MERGE-")
    b = builder.internal
    b.add_processor(this_name, lambda: KTableKTableJoinSide(right_store, fn, True, left_mode), left.name)
    b.connect_processor_and_state_stores(this_name, right_store)
    b.add_processor(other_name, lambda: KTableKTableJoinSide(left_store, fn, False, right_mode), right.name)
    b.connect_processor_and_state_stores(other_name, left_store)
    store_name = builder.store_name(materialized, f"{merge_name}-") if materialized is not None else None
    supplier = KTableProcessorSupplier(KTableKTableJoinMerger, store_name)
    b.add_processor(merge_name, supplier, this_name, other_name)
    value_serde = materialized.value_serde if materialized is not None else None
    if store_name is not None:
        b.add_state_store(table_store_builder(materialized, store_name, left.key_serde, value_serde),
                          merge_name)
    b.copartition(left.source_topics | right.source_topics)
    queryable = store_name if materialized is not None and materialized.store_name else None
    return KTable(builder, merge_name, supplier, left.key_serde, value_serde, queryable,
                  source_topics=left.source_topics | right.source_topics)


def table_join(left: KTable, right: KTable, kind: str, *args: Any, **kwargs: Any) -> KTable:
    """``KTable.join``/``left_join``/``outer_join``: ``(other, joiner, named, materialized)`` joins on
    the primary key; ``(other, foreign_key_extractor, joiner, named, materialized)`` on a foreign key."""
    if len(args) >= 2 and callable(args[0]) and callable(args[1]):
        if kind == OUTER:
            raise TopologyError("Foreign-key joins are inner or left; outer_join joins on the primary key.")
        return foreign_key_join(left, right, kind, *args, **kwargs)
    return table_table_join(left, right, kind, *args, **kwargs)


def _key_partitioner(partitioner: Any, key_serde: Any, which: str) -> Any:
    """A TableJoined partitioner for an internal topic of serialized keys; None stays the default."""
    from strom.streams.kstream.internals.foreign_key_join import KeyBytesPartitioner

    if partitioner is None:
        return None
    if key_serde is None:
        raise TopologyError(f"TableJoined's {which} needs the table's key serde to read keys: give the "
                            "table one (Consumed.with_ or Materialized.with_key_serde).")
    return KeyBytesPartitioner(partitioner, key_serde)


def _foreign_key_join_names(builder: InternalStreamsBuilder, named: Named | None) -> tuple[str, str, str]:
    """Kafka's names of the subscription topic, response topic and subscription store: from the join's
    name, else ``KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>-topic`` and so on."""
    if named is not None and named.name:
        return (f"{named.name}-subscription-registration-topic", f"{named.name}-subscription-response-topic",
                f"{named.name}-subscription-store")
    return (f"KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-{builder.next_index()}-topic",
            f"KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-{builder.next_index()}-topic",
            f"KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-{builder.next_index()}")


def foreign_key_join(left: KTable, right: KTable, kind: str, foreign_key_extractor: Callable[..., Any],
                     joiner: Callable[..., Any], named: Named | TableJoined | None = None,
                     materialized: Materialized | None = None) -> KTable:
    """Join each left row with the right row whose key ``foreign_key_extractor(left value)`` (or
    ``foreign_key_extractor(left key, left value)``, KIP-1104) names."""
    from strom.kafka.serdes import Serdes
    from strom.streams.kstream.internals import foreign_key_join as fk
    from strom.streams.kstream.internals.materialize import table_store_builder
    from strom.streams.kstream.ktable import KTable
    from strom.streams.state.stores import Stores

    if right.builder is not left.builder:
        raise TopologyError("Cannot join tables of different StreamsBuilders.")
    extract = value_function(foreign_key_extractor, "a foreign-key join's foreign_key_extractor")
    fn = value_joiner(joiner, "KTable foreign-key join")
    table_joined = named if isinstance(named, TableJoined) else TableJoined()
    if isinstance(named, TableJoined):
        named = Named(named.name)
    subscription_partitioner = _key_partitioner(table_joined.other_partitioner, right.key_serde,
                                                "other_partitioner")
    response_partitioner = _key_partitioner(table_joined.partitioner, left.key_serde, "partitioner")
    builder = left.builder
    b = builder.internal
    base = named.name if named is not None and named.name else f"KTABLE-FK-JOIN-{builder.next_index()}"
    left.enable_send_old_values()
    right.enable_send_old_values()
    left_store, right_store = ensure_materialized(left), ensure_materialized(right)
    serdes = (left.key_serde, right.key_serde, left.value_serde, right.value_serde)
    subscription_topic, response_topic, subscription_store = _foreign_key_join_names(builder, named)
    send, result = f"{base}-subscription-send", f"{base}-result"
    left_join = kind == LEFT
    for topic in (subscription_topic, response_topic):
        b.add_internal_topic(topic)
    bytes_serde = Serdes.ByteArray()
    b.add_processor(send, lambda: fk.SubscriptionSend(extract, fn, left_join, serdes,
                                                      f"{base}-subscription-sink", result), left.name)
    b.add_sink(f"{base}-subscription-sink", subscription_topic, send, key_serde=bytes_serde,
               value_serde=bytes_serde, partitioner=subscription_partitioner)
    b.add_source(f"{base}-subscription-source", [subscription_topic], bytes_serde, bytes_serde)
    subscriptions = dsl_store_builder(
        None, partial(key_value_supplier, subscription_store),
        lambda chosen: Stores.key_value_store_builder(chosen, bytes_serde, bytes_serde))
    b.add_state_store(subscriptions.with_caching_disabled())
    b.add_processor(f"{base}-subscription-receive",
                    lambda: fk.SubscriptionReceive(subscription_store, right_store, serdes),
                    f"{base}-subscription-source")
    b.connect_processor_and_state_stores(f"{base}-subscription-receive", subscription_store, right_store)
    b.add_processor(f"{base}-foreign-table-change", lambda: fk.ForeignTableChange(subscription_store, serdes),
                    right.name)
    b.connect_processor_and_state_stores(f"{base}-foreign-table-change", subscription_store)
    b.add_sink(f"{base}-response-sink", response_topic, f"{base}-subscription-receive",
               f"{base}-foreign-table-change", key_serde=bytes_serde, value_serde=bytes_serde,
               partitioner=response_partitioner)
    b.add_source(f"{base}-response-source", [response_topic], bytes_serde, bytes_serde)
    b.add_processor(f"{base}-response-join", lambda: fk.ResponseJoin(left_store, fn, left_join, serdes),
                    f"{base}-response-source")
    b.connect_processor_and_state_stores(f"{base}-response-join", left_store)
    b.copartition(right.source_topics | {subscription_topic})
    b.copartition(left.source_topics | {response_topic})
    store_name = builder.store_name(materialized, f"{base}-") if materialized is not None else None
    supplier = KTableProcessorSupplier(KTableKTableJoinMerger, store_name)
    b.add_processor(result, supplier, f"{base}-response-join", send)
    value_serde = materialized.value_serde if materialized is not None else None
    if store_name is not None:
        b.add_state_store(table_store_builder(materialized, store_name, left.key_serde, value_serde),
                          result)
    queryable = store_name if materialized is not None and materialized.store_name else None
    table = KTable(builder, result, supplier, left.key_serde, value_serde, queryable,
                   source_topics=left.source_topics)
    if store_name is None:
        # results carry no old value: a downstream operator that needs one gets a store here
        def materialize() -> None:
            supplier.store_name = name = builder.store_name(None, f"{base}-")
            b.add_state_store(table_store_builder(None, name, left.key_serde, None), result)

        table._materialize_on_demand = materialize
    return table
