"""KStream: a record stream, and BranchedKStream (``split()``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, overload

from strom.errors import TopologyError
from strom.streams.kstream.global_table import GlobalKTable
from strom.streams.kstream.grouped import KGroupedStream
from strom.streams.kstream.internals.concurrent import map_values_supplier, process_supplier
from strom.streams.kstream.internals.functions import key_value_function, takes_key, value_function
from strom.streams.kstream.internals.global_table_join import stream_global_table_join
from strom.streams.kstream.internals.join_kind import JoinKind
from strom.streams.kstream.internals.stateless import (
    KStreamBranch,
    KStreamFilter,
    KStreamFilterNot,
    KStreamFlatMap,
    KStreamFlatMapValues,
    KStreamMap,
    KStreamMapValues,
    KStreamMapValuesWithKey,
    KStreamPeek,
    KStreamPrint,
    KStreamSelectKey,
    PassThrough,
)
from strom.streams.kstream.internals.stream_stream_join import stream_stream_join
from strom.streams.kstream.internals.stream_table_join import stream_table_join
from strom.streams.kstream.join_options import Joined, Joiner, StreamJoined
from strom.streams.kstream.ktable import KTable, to_table
from strom.streams.kstream.options import (
    Branched,
    Grouped,
    Materialized,
    Named,
    Printed,
    Produced,
    Repartitioned,
)
from strom.streams.kstream.windows import JoinWindows
from strom.streams.processor.api import ProcessorSupplier
from strom.streams.processor.fixed_key import FixedKeyProcessorSupplier, fixed_key_supplier

if TYPE_CHECKING:
    from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder

__all__ = [
    "BranchedKStream",
    "KStream",
]


class KStream:
    """An unbounded stream of records. Operators add processors and return new streams.

    ``repartition_required`` is set by key-changing operators; a stateful operator after one reads the
    stream through a repartition topic so that all records of a key meet in one task.
    ``source_topics`` are the topics its records come from (a pattern source stands for the topics it
    matches), for co-partitioning checks.
    """

    def __init__(
        self,
        builder: InternalStreamsBuilder,
        name: str,
        key_serde: Any = None,
        value_serde: Any = None,
        repartition_required: bool = False,
        source_topics: frozenset[str] = frozenset(),
    ) -> None:
        self.builder = builder
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.repartition_required = repartition_required
        self.source_topics = source_topics

    def _child(
        self,
        prefix: str,
        named: Named | None,
        processor: ProcessorSupplier,
        *,
        key_changed: bool = False,
        keeps_serdes: bool = True,
        parents: Iterable[str] = (),
    ) -> KStream:
        name = self.builder.node_name(named, prefix)
        self.builder.internal.add_processor(name, processor, self.name, *parents)
        if key_changed:
            self.builder.key_changing.add(name)
        elif not keeps_serdes:
            self.builder.value_changing.add(name)
        return KStream(
            self.builder,
            name,
            None if key_changed else self.key_serde,
            self.value_serde if keeps_serdes else None,
            self.repartition_required or key_changed,
            self.source_topics,
        )

    # ---- stateless ------------------------------------------------------------------------------
    def filter(self, predicate: Callable[[Any, Any], bool], named: Named | None = None) -> KStream:
        """Keeps records for which ``predicate(key, value)`` is true."""
        fn = key_value_function(predicate, "filter")
        return self._child("KSTREAM-FILTER-", named, lambda: KStreamFilter(fn))

    def filter_not(self, predicate: Callable[[Any, Any], bool], named: Named | None = None) -> KStream:
        """Drops records for which ``predicate(key, value)`` is true."""
        fn = key_value_function(predicate, "filter_not")
        return self._child("KSTREAM-FILTER-", named, lambda: KStreamFilterNot(fn))

    def map(self, mapper: Callable[[Any, Any], tuple[Any, Any]], named: Named | None = None) -> KStream:
        """``mapper(key, value)`` returns the new (key, value); a stateful operator after it repartitions."""
        fn = key_value_function(mapper, "map")
        return self._child(
            "KSTREAM-MAP-", named, lambda: KStreamMap(fn, "map"), key_changed=True, keeps_serdes=False
        )

    def map_values(self, mapper: Callable[..., Any], named: Named | None = None) -> KStream:
        """``mapper(value)`` or ``mapper(key, value)``; the key stays, so no repartitioning follows."""
        processor = KStreamMapValuesWithKey if takes_key(mapper, "map_values") else KStreamMapValues
        return self._child("KSTREAM-MAPVALUES-", named, lambda: processor(mapper), keeps_serdes=False)

    def flat_map(
        self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]], named: Named | None = None
    ) -> KStream:
        """``mapper(key, value)`` returns zero or more (key, value) pairs; the key may change."""
        fn = key_value_function(mapper, "flat_map")
        return self._child(
            "KSTREAM-FLATMAP-", named, lambda: KStreamFlatMap(fn), key_changed=True, keeps_serdes=False
        )

    def flat_map_values(self, mapper: Callable[..., Iterable[Any]], named: Named | None = None) -> KStream:
        """``mapper(value)`` or ``mapper(key, value)`` returns zero or more values; the key stays."""
        fn = value_function(mapper, "flat_map_values")
        return self._child(
            "KSTREAM-FLATMAPVALUES-", named, lambda: KStreamFlatMapValues(fn), keeps_serdes=False
        )

    def select_key(self, mapper: Callable[[Any, Any], Any], named: Named | None = None) -> KStream:
        """``mapper(key, value)`` returns the new key; a stateful operator after it repartitions."""
        fn = key_value_function(mapper, "select_key")
        return self._child("KSTREAM-KEY-SELECT-", named, lambda: KStreamSelectKey(fn), key_changed=True)

    def peek(self, action: Callable[[Any, Any], None], named: Named | None = None) -> KStream:
        """Calls ``action(key, value)`` for each record and forwards it unchanged (logging, metrics)."""
        fn = key_value_function(action, "peek")
        return self._child("KSTREAM-PEEK-", named, lambda: KStreamPeek(fn, True))

    def foreach(self, action: Callable[[Any, Any], None], named: Named | None = None) -> None:
        """Calls ``action(key, value)`` for each record; terminal."""
        fn = key_value_function(action, "foreach")
        self._child("KSTREAM-FOREACH-", named, lambda: KStreamPeek(fn, False))

    def print(self, printed: Printed) -> None:
        """Writes each record as a line ``[label]: key, value`` (``Printed.to_sys_out()`` or
        ``Printed.to_file(path)``); terminal, for debugging."""
        name = self.builder.node_name(Named(printed.name), "KSTREAM-PRINTER-")
        mapper = (key_value_function(printed.mapper, "Printed.with_key_value_mapper")
                  if printed.mapper is not None else None)
        label = printed.label if printed.label is not None else name
        self.builder.internal.add_processor(name, lambda: KStreamPrint(printed.path, label, mapper),
                                            self.name)

    def split(self, named: Named | None = None) -> BranchedKStream:
        """Routes each record to the first matching branch (``branch``), else the default branch."""
        return BranchedKStream(self, self.builder.node_name(named, "KSTREAM-BRANCH-"))

    def merge(self, other: KStream, named: Named | None = None) -> KStream:
        """Interleaves this stream and ``other`` in arrival order."""
        if other.builder is not self.builder:
            raise TopologyError("Cannot merge streams of different StreamsBuilders.")
        merged = self._child("KSTREAM-MERGE-", named, PassThrough, parents=[other.name])
        merged.repartition_required = self.repartition_required or other.repartition_required
        merged.source_topics = self.source_topics | other.source_topics
        if self.key_serde is not other.key_serde:
            merged.key_serde = None
        if self.value_serde is not other.value_serde:
            merged.value_serde = None
        return merged

    # ---- topics ---------------------------------------------------------------------------------
    def to(self, topic: str | Callable[[Any, Any, Any], str], produced: Produced | None = None) -> None:
        """Writes to ``topic``, or to the topic ``topic(key, value, record)`` returns for each record."""
        produced = produced or Produced()
        name = self.builder.node_name(Named(produced.name), "KSTREAM-SINK-")
        self.builder.internal.add_sink(
            name,
            topic,
            self.name,
            key_serde=produced.key_serde or self.key_serde,
            value_serde=produced.value_serde or self.value_serde,
            partitioner=produced.partitioner,
        )

    def repartition(self, repartitioned: Repartitioned | None = None) -> KStream:
        """Writes through the topic ``<application.id>-<name>-repartition`` and reads it back."""
        repartitioned = repartitioned or Repartitioned()
        base = repartitioned.name or self.builder.node_name(None, "KSTREAM-REPARTITION-")
        return self.builder.repartition(
            self.name,
            base,
            repartitioned.key_serde or self.key_serde,
            repartitioned.value_serde or self.value_serde,
            repartitioned.number_of_partitions,
            repartitioned.partitioner,
        )

    def process(self, supplier: ProcessorSupplier, *store_names: str, named: Named | None = None) -> KStream:
        """Runs a Processor API processor; what it forwards is the returned stream (key may change)."""
        stream = self._child("KSTREAM-PROCESSOR-", named, supplier, key_changed=True, keeps_serdes=False)
        self.builder.connect_stores(stream.name, store_names, self.source_topics)
        return stream

    def process_values(
        self, supplier: FixedKeyProcessorSupplier, *store_names: str, named: Named | None = None
    ) -> KStream:
        """Runs a FixedKeyProcessor (KIP-820): it may change values, never keys, so a stateful operator
        after it needs no repartition topic. Use ``process`` for a processor that re-keys."""
        fixed = fixed_key_supplier(supplier)
        stream = self._child("KSTREAM-PROCESSVALUES-", named, fixed, keeps_serdes=False)
        self.builder.connect_stores(stream.name, store_names, self.source_topics)
        return stream

    def map_values_concurrently(
        self, mapper: Callable[[Any], Any], concurrency: int, named: Named | None = None
    ) -> KStream:
        """``mapper(value)`` (plain or ``async def``) on ``concurrency`` key-ordered units, for I/O-bound
        steps: outputs keep per-key order and all finish before the task commits (docs/tasks.md)."""
        supplier = map_values_supplier(mapper, concurrency)
        return self._child("KSTREAM-MAPVALUES-CONCURRENTLY-", named, supplier, keeps_serdes=False)

    def process_concurrently(
        self, fn: Callable[[Any], Any], concurrency: int, named: Named | None = None
    ) -> KStream:
        """``fn(record)`` returning a Record, Records or None, run like ``map_values_concurrently``;
        the key may change."""
        supplier = process_supplier(fn, concurrency)
        return self._child("KSTREAM-PROCESS-CONCURRENTLY-", named, supplier, key_changed=True,
                           keeps_serdes=False)

    # ---- stateful -------------------------------------------------------------------------------
    def group_by_key(self, grouped: Grouped | None = None) -> KGroupedStream:
        """Groups by the current key for an aggregation (repartitioned if the key changed upstream)."""
        grouped = grouped or Grouped()
        return KGroupedStream(
            self.builder,
            self.name,
            grouped.key_serde or self.key_serde,
            grouped.value_serde or self.value_serde,
            self.repartition_required,
            grouped.name,
            self.source_topics,
        )

    def group_by(self, selector: Callable[[Any, Any], Any], grouped: Grouped | None = None) -> KGroupedStream:
        """Groups by ``selector(key, value)`` (as ``select_key(selector).group_by_key(grouped)``); the
        aggregation reads through a repartition topic."""
        return self.select_key(key_value_function(selector, "group_by")).group_by_key(grouped)

    # ---- joins (wired in kstream.internals: stream_stream_join, stream_table_join, global_table_join) --
    @overload
    def join(self, other: KStream, joiner: Joiner, windows: JoinWindows,
             stream_joined: StreamJoined | None = None, /) -> KStream: ...

    @overload
    def join(self, other: KTable, joiner: Joiner, joined: Joined | None = None, /) -> KStream: ...

    @overload
    def join(self, other: GlobalKTable, key_selector: Callable[[Any, Any], Any], joiner: Joiner,
             named: Named | None = None, /) -> KStream: ...

    def join(self, other: KStream | KTable | GlobalKTable, second: Any, third: Any = None,
             fourth: Any = None, /) -> KStream:
        """Inner join with a KStream ``(other, joiner, JoinWindows[, StreamJoined])``, a KTable
        ``(table, joiner[, Joined])`` or a GlobalKTable ``(table, key_selector, joiner[, Named])``. A
        joiner takes ``(left, right)`` or ``(key, left, right)``."""
        return self._join(JoinKind.INNER, other, second, third, fourth)

    @overload
    def left_join(self, other: KStream, joiner: Joiner, windows: JoinWindows,
                  stream_joined: StreamJoined | None = None, /) -> KStream: ...

    @overload
    def left_join(self, other: KTable, joiner: Joiner, joined: Joined | None = None, /) -> KStream: ...

    @overload
    def left_join(self, other: GlobalKTable, key_selector: Callable[[Any, Any], Any], joiner: Joiner,
                  named: Named | None = None, /) -> KStream: ...

    def left_join(self, other: KStream | KTable | GlobalKTable, second: Any, third: Any = None,
                  fourth: Any = None, /) -> KStream:
        """Left join (every record of this stream, with None for a missing partner); arguments as
        ``join``."""
        return self._join(JoinKind.LEFT, other, second, third, fourth)

    def outer_join(self, other: KStream, joiner: Joiner, windows: JoinWindows,
                   stream_joined: StreamJoined | None = None, /) -> KStream:
        """Outer join with another KStream (every record of either side, with None for a missing
        partner)."""
        return self._join(JoinKind.OUTER, other, joiner, windows, stream_joined)

    def _join(self, kind: JoinKind, other: Any, second: Any, third: Any, fourth: Any) -> KStream:
        if isinstance(other, KStream):
            return stream_stream_join(self, other, kind, second, third, fourth)
        if kind is JoinKind.OUTER:
            raise TopologyError("outer_join of a KStream needs another KStream; KStream-KTable and "
                                "KStream-GlobalKTable joins are inner or left.")
        if isinstance(other, KTable):
            if fourth is not None:
                raise TopologyError(f"A KStream-KTable join takes (table, joiner, Joined); got {fourth!r} "
                                    "as well.")
            return stream_table_join(self, other, kind, second, third)
        if isinstance(other, GlobalKTable):
            return stream_global_table_join(self, other, kind, second, third, fourth)
        raise TopologyError(f"A KStream joins a KStream, a KTable or a GlobalKTable, not {other!r}.")

    def to_table(
        self, named: Named | Materialized | None = None, materialized: Materialized | Named | None = None
    ) -> KTable:
        """The stream as a table: each record is an update of its key (null keys are dropped). After a key
        change the stream goes through a repartition topic first."""
        stream = self
        if self.repartition_required:
            base = self.builder.node_name(None, "KSTREAM-TOTABLE-")
            stream = self.builder.repartition(self.name, base, self.key_serde, self.value_serde)
        else:
            self.builder.require_copartitioned(self.source_topics)
        return to_table(stream, named, materialized)


class BranchedKStream:
    """``split()``: ``branch(predicate, Branched...)`` in order, then ``default_branch`` or
    ``no_default_branch``.

    Branch names are the split name plus the branch's name (or its 1-based position); the result maps
    them to the branch streams (or to what a ``Branched.with_function`` returned)."""

    def __init__(self, stream: KStream, name: str) -> None:
        self.stream = stream
        self.name = name
        self._branches: list[tuple[Callable[[Any, Any], bool], str, Branched]] = []
        self._done = False

    def branch(
        self, predicate: Callable[[Any, Any], bool], branched: Branched | None = None
    ) -> BranchedKStream:
        """Adds a branch taking the records ``predicate(key, value)`` accepts and no earlier branch took."""
        self._check_open()
        branched = branched or Branched()
        child = self.name + (branched.name or str(len(self._branches) + 1))
        self._branches.append((key_value_function(predicate, "branch"), child, branched))
        return self

    def default_branch(self, branched: Branched | None = None) -> dict[str, Any]:
        """Adds the branch for records no predicate accepted and finishes the split."""
        branched = branched or Branched()
        return self._finish((self.name + (branched.name or "0"), branched))

    def no_default_branch(self) -> dict[str, Any]:
        """Finishes the split; records no predicate accepted are dropped."""
        return self._finish(None)

    def _check_open(self) -> None:
        if self._done:
            raise TopologyError(f"split {self.name!r} is already finished; start a new split().")

    def _finish(self, default: tuple[str, Branched] | None) -> dict[str, Any]:
        self._check_open()
        self._done = True
        builder = self.stream.builder
        predicates = [p for p, _, _ in self._branches]
        children = [c for _, c, _ in self._branches]
        default_child = default[0] if default else None
        builder.internal.add_processor(
            self.name, lambda: KStreamBranch(predicates, children, default_child), self.stream.name
        )
        outputs = [(c, b) for _, c, b in self._branches] + ([default] if default else [])
        result: dict[str, Any] = {}
        for child, branched in outputs:
            builder.internal.add_processor(child, PassThrough, self.name)
            branch = KStream(
                builder,
                child,
                self.stream.key_serde,
                self.stream.value_serde,
                self.stream.repartition_required,
                self.stream.source_topics,
            )
            if branched.chain is None:
                result[child] = branch
            elif branched.consume:
                branched.chain(branch)
            else:
                result[child] = branched.chain(branch)
        return result
