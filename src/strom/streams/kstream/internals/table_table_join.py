"""KTable-KTable joins on the primary key (Kafka's KTableKTableInnerJoin / LeftJoin / RightJoin /
OuterJoin and KTableKTableJoinMerger).

Each side's update ``Change(new, old)`` is joined with the other table's current value, read through its
value getter (kstream.internals.value_getter). As in Kafka
Streams, a left (outer) join's left (both) tables send old values, and all of them do once an operator
after the join needs old values. The merger forwards both sides' results and, when the join is
materialized, stores them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.streams.kstream.change import Change
from strom.streams.kstream.internals.join_kind import JoinKind
from strom.streams.kstream.internals.materialize import table_store_builder
from strom.streams.kstream.internals.table import KTableProcessorSupplier, TimestampedTupleForwarder
from strom.streams.kstream.internals.value_getter import DerivedValueGetter, ValueGetter, ValueGetterSupplier
from strom.streams.kstream.join_options import ValueJoiner, value_joiner
from strom.streams.kstream.options import Materialized, Named, named_and_materialized
from strom.streams.processor.api import Processor, Record
from strom.streams.state.internals.metered import MeteredVersionedKeyValueStore
from strom.streams.state.stores import RocksDBVersionedStoreSupplier
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.versioned import PUT_RETURN_CODE_NOT_PUT, PUT_RETURN_CODE_VALID_TO_UNDEFINED

if TYPE_CHECKING:
    from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder
    from strom.streams.kstream.ktable import KTable


class SideMode(enum.Enum):
    """How one side treats a missing partner, following Kafka's processor for that side."""

    INNER = "inner"                    # both values needed
    PRESERVE_THIS = "preserve_this"    # left side of a left join
    PRESERVE_OTHER = "preserve_other"  # right side of a left join
    OUTER = "outer"                    # either value is enough


class KTableKTableJoinSide(Processor):
    def __init__(self, other: ValueGetter, joiner: ValueJoiner, this_is_left: bool, mode: SideMode) -> None:
        self.other = other
        self.joiner = joiner
        self.this_is_left = this_is_left
        self.mode = mode

    def init(self, context: Any) -> None:
        self.context = context
        self.other.init(context)

    def close(self) -> None:
        self.other.close()

    def _join(self, key: Any, this: Any, other: Any) -> Any:
        return self.joiner(key, this, other) if self.this_is_left else self.joiner(key, other, this)

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            self.context.metrics.dropped_records += 1
            return
        change: Change = record.value
        if not change.is_latest:
            return  # a versioned table's out-of-order update (KIP-914)
        new, old = change.new_value, change.old_value
        current = self.other.get(key)
        other = None if current is None else current.value
        mode = self.mode
        needs_other = mode in (SideMode.INNER, SideMode.PRESERVE_OTHER)
        if other is None and (needs_other or (new is None and old is None)):
            return
        if mode is SideMode.PRESERVE_OTHER:
            new_result, old_result = self._join(key, new, other), self._join(key, old, other)
        elif mode is SideMode.OUTER:
            new_result = self._join(key, new, other) if new is not None or other is not None else None
            old_result = self._join(key, old, other) if old is not None or other is not None else None
        else:
            new_result = None if new is None else self._join(key, new, other)
            old_result = None if old is None else self._join(key, old, other)
        timestamp = record.timestamp if current is None else max(record.timestamp, current.timestamp)
        self.context.forward(Record(key, Change(new_result, old_result), timestamp, record.raw_headers))


class KTableKTableJoinValueGetter(DerivedValueGetter):
    """A join result without a store, computed from both tables' getters as the left side's processor
    would join them (Kafka's KTableKTableInnerJoin / LeftJoin / OuterJoin value getters)."""

    def __init__(self, left: ValueGetter, right: ValueGetter, joiner: ValueJoiner, kind: JoinKind) -> None:
        super().__init__(left)
        self.right = right
        self.joiner = joiner
        self.kind = kind

    def init(self, context: Any) -> None:
        super().init(context)
        self.right.init(context)

    def close(self) -> None:
        super().close()
        self.right.close()

    def get(self, key: Any, as_of: int | None = None) -> Any:
        left = self.parent.get(key)
        if left is None and self.kind is not JoinKind.OUTER:
            return None
        right = self.right.get(key)
        if right is None:
            if self.kind is JoinKind.INNER:
                return None
            if left is None:
                return None
            return ValueAndTimestamp.make(self.joiner(key, left.value, None), left.timestamp)
        if left is None:
            return ValueAndTimestamp.make(self.joiner(key, None, right.value), right.timestamp)
        return ValueAndTimestamp.make(self.joiner(key, left.value, right.value),
                                      max(left.timestamp, right.timestamp))


class KTableKTableJoinMerger(Processor):
    """Both sides' results in one table; stored (and cache-forwarded) when the join is materialized. A
    versioned store takes a result older than its key's latest into the history and forwards it as an
    OutOfOrderChange, and one older than the history retention not at all (as Kafka's merger)."""

    def __init__(self, supplier: KTableProcessorSupplier) -> None:
        self.supplier = supplier
        self.store: Any = None

    def init(self, context: Any) -> None:
        self.context = context
        if self.supplier.store_name is not None:
            self.store = context.get_state_store(self.supplier.store_name)
            self.forwarder = TimestampedTupleForwarder(self.store, context, self.supplier.send_old_values)

    def process(self, record: Record) -> None:
        change: Change = record.value
        if self.store is None:
            old = change.old_value if self.supplier.send_old_values else None
            self.context.forward(Record(record.key, Change(change.new_value, old), record.timestamp,
                                        record.raw_headers))
            return
        latest = True
        if isinstance(self.store, MeteredVersionedKeyValueStore):
            code = self.store.put(record.key, change.new_value, record.timestamp)
            if code == PUT_RETURN_CODE_NOT_PUT:
                return
            latest = code == PUT_RETURN_CODE_VALID_TO_UNDEFINED
        else:
            self.store.put(record.key, ValueAndTimestamp.make(change.new_value, record.timestamp))
        self.forwarder.maybe_forward(record.key, change.new_value, change.old_value, record.timestamp, latest)


_SIDE_MODES = {JoinKind.INNER: (SideMode.INNER, SideMode.INNER),
               JoinKind.LEFT: (SideMode.PRESERVE_THIS, SideMode.PRESERVE_OTHER),
               JoinKind.OUTER: (SideMode.OUTER, SideMode.OUTER)}


def table_table_join(left: KTable, right: KTable, kind: JoinKind, joiner: Callable[..., Any],
                     named: Named | None = None, materialized: Materialized | None = None) -> KTable:
    """A table of ``joiner(left value, right value)`` per key, updated from both sides: a join processor
    per side reads the other side's store, a merger (stored when ``materialized``) is the result."""
    check_same_builder(left, right)
    named, materialized = named_and_materialized(named, materialized)
    fn = value_joiner(joiner, f"KTable.{kind.value}")
    left_mode, right_mode = _SIDE_MODES[kind]
    prefix = f"KTABLE-{kind.node_infix}"
    builder = left.builder
    if kind is not JoinKind.INNER:
        left.enable_send_old_values()
    if kind is JoinKind.OUTER:
        right.enable_send_old_values()
    left_values, right_values = left.value_getter(), right.value_getter()
    base = named.name if named is not None and named.name else None
    this_name = f"{base}-join-this" if base else builder.node_name(None, f"{prefix}THIS-")
    other_name = f"{base}-join-other" if base else builder.node_name(None, f"{prefix}OTHER-")
    merge_name = base or builder.node_name(None, "KTABLE-MERGE-")
    b = builder.internal
    b.add_processor(this_name, lambda: KTableKTableJoinSide(right_values.get(), fn, True, left_mode),
                    left.name)
    b.connect_processor_and_state_stores(this_name, *right_values.store_names)
    b.add_processor(other_name, lambda: KTableKTableJoinSide(left_values.get(), fn, False, right_mode),
                    right.name)
    b.connect_processor_and_state_stores(other_name, *left_values.store_names)
    b.copartition(left.source_topics | right.source_topics)
    table = joined_table(builder, merge_name, (this_name, other_name), left.key_serde, materialized,
                         f"{merge_name}-", left.source_topics | right.source_topics)
    table.joined = (left, right)
    table.view = lambda: ValueGetterSupplier(
        tuple(dict.fromkeys((*left_values.store_names, *right_values.store_names))),
        lambda: KTableKTableJoinValueGetter(left_values.get(), right_values.get(), fn, kind))
    return table


def check_same_builder(left: KTable, right: KTable) -> None:
    if right.builder is not left.builder:
        raise TopologyError("Cannot join tables of different StreamsBuilders.")


def joined_table(builder: InternalStreamsBuilder, name: str, parents: tuple[str, ...], key_serde: Any,
                 materialized: Materialized | None, store_prefix: str,
                 source_topics: frozenset[str]) -> KTable:
    """The merger node ``name`` after ``parents`` (the join's result nodes) and the table it is, keyed as
    the left table; stored under the user's name, else ``<store_prefix>STATE-STORE-<n>``, when
    ``materialized``."""
    store_name = builder.store_name(materialized, store_prefix) if materialized is not None else None
    supplier = KTableProcessorSupplier(KTableKTableJoinMerger, store_name)
    builder.internal.add_processor(name, supplier, *parents)
    value_serde = materialized.value_serde if materialized is not None else None
    if store_name is not None:
        store = table_store_builder(materialized, store_name, key_serde, value_serde, versioned_ok=True)
        builder.internal.add_state_store(store, name)
    queryable = store_name if materialized is not None and materialized.store_name else None
    table = builder.new_table(name, supplier, key_serde, value_serde, queryable, source_topics=source_topics)
    table.output_versioned = materialized is not None and isinstance(materialized.store_supplier,
                                                                     RocksDBVersionedStoreSupplier)
    return table
