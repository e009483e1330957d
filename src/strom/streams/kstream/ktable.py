"""KTable: a changelog stream viewed as a table (latest value per key), and how tables are created."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from strom.errors import TopologyError
from strom.streams.kstream.internals.foreign_key_join import foreign_key_join
from strom.streams.kstream.internals.functions import key_value_function, value_function
from strom.streams.kstream.internals.join_kind import JoinKind
from strom.streams.kstream.internals.materialize import table_store_builder
from strom.streams.kstream.internals.suppress import suppress
from strom.streams.kstream.internals.table import (
    KTableFilter,
    KTableFilterValueGetter,
    KTableMapValues,
    KTableMapValuesValueGetter,
    KTableProcessorSupplier,
    KTableRepartitionMap,
    KTableSource,
    KTableToStream,
    KTableTransformValues,
    KTableTransformValuesGetter,
)
from strom.streams.kstream.internals.table_table_join import table_table_join
from strom.streams.kstream.internals.value_getter import ValueGetter, ValueGetterSupplier, stored_values
from strom.streams.kstream.join_options import Joiner, TableJoined
from strom.streams.kstream.options import Consumed, Grouped, Materialized, Named, named_and_materialized
from strom.streams.state.stores import RocksDBVersionedStoreSupplier

if TYPE_CHECKING:
    from strom.streams.kstream.grouped import KGroupedTable
    from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder
    from strom.streams.kstream.kstream import KStream
    from strom.streams.kstream.suppressed import Suppressed
    from strom.streams.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
    from strom.streams.processor.api import ProcessorContext

__all__ = [
    "KTable",
    "ValueTransformerWithKey",
]


class ValueTransformerWithKey:
    """Kafka's ValueTransformerWithKey for ``KTable.transform_values``: a stateful per-task value
    mapping. ``init`` gets the processor context (``get_state_store`` for connected stores);
    ``transform(key, value)`` returns the new value (it must not ``forward``: the result is the new
    value); ``close`` releases resources."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def transform(self, key: Any, value: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the task closes."""


class KTable:
    """Operators forward ``Change(new, old)`` records. ``queryable_store_name`` is the store name when the
    table was materialized under a name (``Materialized.as_``), else None."""

    windows: TimeWindows | SlidingWindows | SessionWindows | None = None
    """The windows of a table keyed by ``Windowed`` keys (a windowed aggregation's), for suppress."""

    def __init__(
        self,
        builder: InternalStreamsBuilder,
        name: str,
        supplier: KTableProcessorSupplier,
        key_serde: Any,
        value_serde: Any,
        queryable_store_name: str | None,
        parent: KTable | None = None,
        source_topics: frozenset[str] = frozenset(),
    ) -> None:
        self.builder = builder
        self.name = name
        self.supplier = supplier
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.queryable_store_name = queryable_store_name
        self.parent = parent
        self.source_topics = source_topics
        self._store_when_needed: Callable[[], None] | None = None
        self.joined: tuple[KTable, ...] = ()
        """The tables a primary-key join's result is computed from."""
        self.view: Callable[[], ValueGetterSupplier] | None = None
        """How to read the table while it has no store (Kafka's ``view()``): a getter computed from its
        parents' (kept here, not on the supplier, which travels with the topology to Spark's workers)."""
        self.output_versioned: bool | None = None
        """Whether the store this table was materialized in is versioned (None: not materialized)."""

    def is_versioned(self) -> bool:
        """Whether the table has versioned semantics (KIP-914, Kafka's isVersionedOrVersionedUpstream):
        a materialized table's store decides, an unmaterialized one inherits its parent's; a join's or
        an aggregation's result without a versioned store is not versioned."""
        if self.output_versioned is not None:
            return self.output_versioned
        return self.parent is not None and self.parent.is_versioned()

    def enable_send_old_values(self, force: bool = True) -> bool:
        """Downstream needs (new, old) pairs: whether this table can give them (Kafka's
        enableSendingOldValues). A table without a store gets them from its parent, a join's result from
        both joined tables (stored for it); a table stored when needed (``store_when_needed``) gets its
        store now when ``force``, else it answers False (a KTable.filter only asks, to drop deletions of
        rows it never had when old values come for free)."""
        supplier = self.supplier
        if not supplier.send_old_values:
            if self.joined:
                for table in self.joined:
                    table.enable_send_old_values()
            elif supplier.store_name is None:
                if self._store_when_needed is not None:
                    if not force:
                        return False
                    self._store_when_needed()
                elif self.parent is not None and not self.parent.enable_send_old_values(force):
                    return False
            supplier.send_old_values = True
        return True

    def store_when_needed(self, materialize: Callable[[], None]) -> None:
        """Defers this table's store until an operator reads its values (a join) or needs old values:
        ``materialize()`` then gives it one (a source table without a user's store name, a foreign-key
        join's result)."""
        self._store_when_needed = materialize

    def value_getter(self) -> ValueGetterSupplier:
        """How a join reads this table's values (Kafka's valueGetterSupplier): from its store; a table
        stored when needed (a source, a foreign-key join's result) gets it now, as Kafka's KTableSource is
        materialized for a getter; any other table without a store is computed from its parent's getter."""
        supplier = self.supplier
        if supplier.store_name is None and self._store_when_needed is not None:
            self._store_when_needed()
        if supplier.store_name is not None:
            return stored_values(supplier.store_name)
        assert self.view is not None, f"table {self.name} has neither a store nor a view"
        return self.view()

    def materialize(self, materialized: Materialized | None, store_name: str, *writers: str,
                    versioned_ok: bool = False) -> None:
        """Gives this table a timestamped store built as ``materialized`` says (RocksDB, cached and
        logged unless it says otherwise), connected to the processors that write it (default: the
        table's own); queryable only under a name the user gave."""
        self.supplier.store_name = store_name
        self.output_versioned = materialized is not None and isinstance(materialized.store_supplier,
                                                                        RocksDBVersionedStoreSupplier)
        store = table_store_builder(materialized, store_name, self.key_serde, self.value_serde,
                                    versioned_ok=versioned_ok)
        self.builder.internal.add_state_store(store, *(writers or (self.name,)))
        if materialized is not None and materialized.store_name:
            self.queryable_store_name = store_name

    def _derive(
        self,
        prefix: str,
        named: Named | Materialized | None,
        materialized: Materialized | Named | None,
        factory: Callable[[KTableProcessorSupplier], Any],
        value_serde: Any,
        getter: Callable[[ValueGetter], ValueGetter],
        *getter_stores: str,
    ) -> KTable:
        """A table computed from this one; stored only when a Materialized is given, else read through
        ``getter(parent's getter)`` (which also reads ``getter_stores``)."""
        named, materialized = named_and_materialized(named, materialized)
        name = self.builder.node_name(named, prefix)
        store_name = None if materialized is None else self.builder.store_name(materialized, prefix)
        table = materialized_table(
            self.builder,
            name,
            self.name,
            factory,
            materialized,
            store_name,
            self.key_serde,
            value_serde,
            parent=self,
            source_topics=self.source_topics,
            versioned_ok=True,
        )
        table.view = lambda: self.value_getter().derived(getter, *getter_stores)
        return table

    def filter(
        self,
        predicate: Callable[[Any, Any], bool],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """Keeps rows for which ``predicate(key, value)`` is true; others become deletions."""
        return self._filter(key_value_function(predicate, "KTable.filter"), True, named, materialized)

    def filter_not(
        self,
        predicate: Callable[[Any, Any], bool],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """Drops rows for which ``predicate(key, value)`` is true (they become deletions)."""
        return self._filter(key_value_function(predicate, "KTable.filter_not"), False, named, materialized)

    def _filter(
        self,
        predicate: Callable[[Any, Any], bool],
        keep_when: bool,
        named: Named | Materialized | None,
        materialized: Materialized | Named | None,
    ) -> KTable:
        versioned = self.is_versioned()
        table = self._derive(
            "KTABLE-FILTER-",
            named,
            materialized,
            lambda s: KTableFilter(s, predicate, keep_when, versioned),
            self.value_serde,
            lambda parent: KTableFilterValueGetter(parent, predicate, keep_when),
        )
        # as in Kafka Streams: old values from a parent that has them anyway let the filter drop the
        # deletion of a row it never let through (KAFKA-10077)
        if self.enable_send_old_values(force=False):
            table.supplier.send_old_values = True
        return table

    def map_values(
        self,
        mapper: Callable[..., Any],
        named: Named | Materialized | None = None,
        materialized: Materialized | Named | None = None,
    ) -> KTable:
        """``mapper(value)`` or ``mapper(key, value)`` for every row; deletions stay deletions. The
        result's value serde is the Materialized's (else default.value.serde)."""
        fn = value_function(mapper, "KTable.map_values")
        return self._derive("KTABLE-MAPVALUES-", named, materialized, lambda s: KTableMapValues(s, fn), None,
                            lambda parent: KTableMapValuesValueGetter(parent, fn))

    def transform_values(
        self,
        supplier: Callable[[], ValueTransformerWithKey],
        *store_names: str,
        named: Named | None = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """``supplier()`` makes a ValueTransformerWithKey per task; it may read and write the named
        stores. Unlike ``map_values`` it sees deletions too (value None); a None result deletes."""
        if isinstance(supplier, ValueTransformerWithKey) or not callable(supplier):
            raise TopologyError(
                "transform_values needs a supplier that makes a new transformer per task (the "
                f"ValueTransformerWithKey class, or a function returning a new instance), got {supplier!r}."
            )
        table = self._derive(
            "KTABLE-TRANSFORMVALUES-",
            named,
            materialized,
            lambda s: KTableTransformValues(s, supplier()),
            None,
            lambda parent: KTableTransformValuesGetter(parent, supplier()),
            *store_names,
        )
        self.builder.connect_stores(table.name, store_names, self.source_topics)
        return table

    def to_stream(
        self, mapper: Callable[[Any, Any], Any] | Named | None = None, named: Named | None = None
    ) -> KStream:
        """The table's changelog as a stream of new values (None for a deletion). With
        ``mapper(key, value)`` the records are keyed by what it returns (as ``to_stream().select_key``),
        so a stateful operator after it repartitions. ``to_stream(named)`` names the node."""
        if isinstance(mapper, Named):
            if named is not None:
                raise TopologyError("to_stream takes one Named; pass it as to_stream(mapper, named).")
            mapper, named = None, mapper
        name = self.builder.node_name(named, "KTABLE-TOSTREAM-")
        self.builder.internal.add_processor(name, KTableToStream, self.name)
        stream = self.builder.new_stream(name, self.key_serde, self.value_serde,
                                         source_topics=self.source_topics)
        return stream if mapper is None else stream.select_key(key_value_function(mapper, "KTable.to_stream"))

    def group_by(
        self, selector: Callable[[Any, Any], tuple[Any, Any]], grouped: Grouped | None = None
    ) -> KGroupedTable:
        """Re-keys the table: ``selector(key, value)`` returns the new (key, value). Always repartitions."""
        from strom.streams.kstream.grouped import KGroupedTable  # cycle: grouped aggregations return KTables

        fn = key_value_function(selector, "KTable.group_by")
        grouped = grouped or Grouped()
        self.enable_send_old_values()
        name = self.builder.node_name(Named(grouped.name and f"{grouped.name}-select"), "KTABLE-SELECT-")
        self.builder.internal.add_processor(name, lambda: KTableRepartitionMap(fn), self.name)
        return KGroupedTable(
            self.builder, name, grouped.key_serde, grouped.value_serde, grouped.name, self.source_topics
        )

    def suppress(self, suppressed: Suppressed) -> KTable:
        """Hold back updates: final results per window, or at most one per key per time limit. Not of a
        versioned table (as in Kafka Streams: it would forward out-of-order updates as the latest)."""
        if self.is_versioned():
            raise TopologyError(
                f"suppress() needs a table that is not versioned, and {self.name} is or derives from one "
                "materialized in a versioned store (Stores.persistent_versioned_key_value_store); "
                "materialize it (or the table it derives from) with a key-value store instead.")
        return suppress(self, suppressed)

    # ---- joins (wired in kstream.internals: table_table_join, foreign_key_join) -------------------
    @overload
    def join(self, other: KTable, joiner: Joiner, named: Named | None = None,
             materialized: Materialized | None = None, /) -> KTable: ...

    @overload
    def join(self, other: KTable, foreign_key_extractor: Callable[..., Any], joiner: Joiner,
             named: Named | TableJoined | None = None, materialized: Materialized | None = None,
             /) -> KTable: ...

    def join(self, other: KTable, second: Any, third: Any = None, fourth: Any = None, fifth: Any = None,
             /) -> KTable:
        """Inner join on the primary key ``(other, joiner[, Named][, Materialized])``, or on a foreign
        key ``(other, foreign_key_extractor, joiner[, Named or TableJoined][, Materialized])``: each row
        joins the ``other`` row whose key ``foreign_key_extractor(value)`` (or ``(key, value)``) returns."""
        return self._join(JoinKind.INNER, other, second, third, fourth, fifth)

    @overload
    def left_join(self, other: KTable, joiner: Joiner, named: Named | None = None,
                  materialized: Materialized | None = None, /) -> KTable: ...

    @overload
    def left_join(self, other: KTable, foreign_key_extractor: Callable[..., Any], joiner: Joiner,
                  named: Named | TableJoined | None = None, materialized: Materialized | None = None,
                  /) -> KTable: ...

    def left_join(self, other: KTable, second: Any, third: Any = None, fourth: Any = None,
                  fifth: Any = None, /) -> KTable:
        """Left join (every row of this table, with None for a missing partner); arguments as ``join``."""
        return self._join(JoinKind.LEFT, other, second, third, fourth, fifth)

    def outer_join(self, other: KTable, joiner: Joiner, named: Named | None = None,
                   materialized: Materialized | None = None, /) -> KTable:
        """Outer join on the primary key (every row of either table, with None for a missing partner)."""
        return self._join(JoinKind.OUTER, other, joiner, named, materialized, None)

    def _join(self, kind: JoinKind, other: KTable, second: Any, third: Any, fourth: Any,
              fifth: Any) -> KTable:
        if callable(second) and callable(third):
            return foreign_key_join(self, other, kind, second, third, fourth, fifth)
        if fifth is not None:
            raise TopologyError(f"A primary-key KTable join takes (other, joiner, Named, Materialized); got "
                                f"{fifth!r} as well.")
        return table_table_join(self, other, kind, second, third, fourth)


def materialized_table(
    builder: InternalStreamsBuilder,
    name: str,
    parent_node: str,
    factory: Callable[[KTableProcessorSupplier], Any],
    materialized: Materialized | None,
    store_name: str | None,
    key_serde: Any,
    value_serde: Any,
    *,
    parent: KTable | None = None,
    source_topics: frozenset[str] = frozenset(),
    versioned_ok: bool = False,
) -> KTable:
    """Adds table processor ``name`` (with its store when ``store_name`` is given). The table's serdes
    are the Materialized's, else the given ones."""
    if materialized is not None:
        key_serde = materialized.key_serde or key_serde
        value_serde = materialized.value_serde or value_serde
    supplier = KTableProcessorSupplier(factory, None)
    builder.internal.add_processor(name, supplier, parent_node)
    table = KTable(builder, name, supplier, key_serde, value_serde, None, parent, source_topics)
    if store_name is not None:
        table.materialize(materialized, store_name, versioned_ok=versioned_ok)
    return table


def source_table(
    builder: InternalStreamsBuilder, topic: str, consumed: Consumed, materialized: Materialized | None
) -> KTable:
    """StreamsBuilder.table: a source node and a KTableSource, materialized when named (or when a
    downstream operator needs old values)."""
    source_name = builder.node_name(Named(consumed.name), "KSTREAM-SOURCE-")
    builder.internal.add_source(source_name, [topic], consumed.key_serde, consumed.value_serde,
                                consumed.timestamp_extractor, consumed.offset_reset_policy)
    table = _table_processor(
        builder,
        "KTABLE-SOURCE-",
        Named(),
        materialized,
        source_name,
        consumed.key_serde,
        consumed.value_serde,
        f"{topic}-",
    )
    table.source_topics = frozenset({topic})
    builder.table_sources[table.name] = topic
    return table


def to_table(
    stream: KStream, named: Named | Materialized | None, materialized: Materialized | Named | None
) -> KTable:
    named, materialized = named_and_materialized(named, materialized)
    return _table_processor(
        stream.builder,
        "KSTREAM-TOTABLE-",
        named,
        materialized,
        stream.name,
        stream.key_serde,
        stream.value_serde,
        "KSTREAM-TOTABLE-",
        stream.source_topics,
    )


def _table_processor(
    builder: InternalStreamsBuilder,
    prefix: str,
    named: Named | None,
    materialized: Materialized | None,
    parent: str,
    key_serde: Any,
    value_serde: Any,
    store_prefix: str,
    source_topics: frozenset[str] = frozenset(),
) -> KTable:
    """A KTableSource: materialized now under the user's store name, else only when a downstream
    operator needs old values."""
    name = builder.node_name(named, prefix)
    store_name = builder.store_name(materialized, store_prefix)
    named_store = materialized is not None and materialized.store_name is not None
    table = materialized_table(
        builder,
        name,
        parent,
        KTableSource,
        materialized,
        store_name if named_store else None,
        key_serde,
        value_serde,
        source_topics=source_topics,
        versioned_ok=True,
    )
    if not named_store:
        table.store_when_needed(lambda: table.materialize(materialized, store_name, versioned_ok=True))
    return table
