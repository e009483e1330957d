"""KStream-KStream windowed joins, inner, left and outer, with Kafka Streams' current semantics.

Each side buffers its records in a window store (retaining duplicates) and looks up the other side's
store for records within the join window. Left/outer records without a match wait in a shared
"outer" store and are emitted with a None partner only once their window has closed (record time +
window + grace < stream time), so no spurious [A, None] results appear before a late match
(Kafka's KStreamKStreamJoin with the spurious-results fix, KIP-633).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams.kstream.internals.dsl_stores import dsl_store_builder, key_value_supplier
from strom.streams.kstream.internals.join_kind import JoinKind
from strom.streams.kstream.internals.stateless import PassThrough
from strom.streams.kstream.join_options import StreamJoined, ValueJoiner, value_joiner
from strom.streams.kstream.options import Materialized, StoreType
from strom.streams.kstream.windows import JoinWindows
from strom.streams.processor.api import Processor, Record
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP, pack_timestamp, unpack_timestamp
from strom.streams.state.stores import Stores
from strom.streams.state.window import builders

if TYPE_CHECKING:
    from strom.streams.kstream.kstream import KStream

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">i")
LEFT_SIDE, RIGHT_SIDE = 1, 0
NO_TIME = MAX_TIMESTAMP


class TimeTracker:
    """Stream time over both sides of one join in one task, and the oldest waiting outer record."""

    def __init__(self) -> None:
        self.stream_time = -1
        self.min_time = -1  # unknown (e.g. after a restart): the first check scans the outer store

    def advance(self, timestamp: int) -> None:
        if timestamp > self.stream_time:
            self.stream_time = timestamp


class KStreamJoinWindow(Processor):
    """Forwards a record to its join processor, then buffers it in its side's window store."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        self.context.forward(record)
        # a record without key or value can never be joined: nothing to buffer (KIP-962 lets left
        # and outer joins still emit null-key records, which the join processor decides)
        if record.key is not None and record.value is not None:
            self.store.put(record.key, record.value, record.timestamp)


def _encode_values(values: list[bytes]) -> bytes:
    return b"".join(_LENGTH.pack(len(v)) + v for v in values)


def _decode_values(data: bytes) -> Iterator[bytes]:
    position = 0
    while position < len(data):
        (length,) = _LENGTH.unpack_from(data, position)
        yield data[position + 4:position + 4 + length]
        position += 4 + length


class KStreamKStreamJoinSide(Processor):
    """The join processor of one side: looks up the other side's window store."""

    def __init__(self, is_left: bool, other_store: str, outer_store: str | None, windows: JoinWindows,
                 joiner: ValueJoiner, outer: bool, trackers: dict[str, TimeTracker],
                 serdes: tuple[Any, Any, Any]) -> None:
        self.is_left = is_left
        self.other_store_name = other_store
        self.outer_store_name = outer_store
        self.join_before = windows.before_ms if is_left else windows.after_ms
        self.join_after = windows.after_ms if is_left else windows.before_ms
        self.windows = windows
        self.joiner = joiner
        self.outer = outer
        self.trackers = trackers
        self.serdes = serdes

    def init(self, context: Any) -> None:
        self.context = context
        self.other_store = context.get_state_store(self.other_store_name)
        outer = self.outer_store_name
        self.outer_store = None if outer is None else context.get_state_store(outer)
        self.tracker = self.trackers.setdefault(context.task_id, TimeTracker())
        self.tracker.advance(self.other_store.observed_stream_time)  # both sides' times survive restarts
        key_serde, left_serde, right_serde = self.serdes
        task = context.task
        self.key_serde = key_serde or task.key_serde
        self.value_serdes = {LEFT_SIDE: left_serde or task.value_serde,
                             RIGHT_SIDE: right_serde or task.value_serde}
        self.side = LEFT_SIDE if self.is_left else RIGHT_SIDE

    def close(self) -> None:
        self.trackers.pop(self.context.task_id, None)

    def _join(self, key: Any, this: Any, other: Any) -> Any:
        return self.joiner(key, this, other) if self.is_left else self.joiner(key, other, this)

    def process(self, record: Record) -> None:
        timestamp = record.timestamp
        tracker = self.tracker
        tracker.advance(timestamp)
        key, value = record.key, record.value
        if self.outer and key is None and value is not None:
            self.context.forward(record.with_value(self._join(key, value, None)))
            return
        if key is None or value is None:
            log.debug("Skipping stream-stream join record with null key or value: %r", record)
            self.context.metrics.dropped_records += 1
            return
        if self.outer_store is not None and timestamp == tracker.stream_time:
            self._emit_closed_outer_records(record)
        time_from = max(0, timestamp - self.join_before)
        time_to = max(0, timestamp + self.join_after)
        matches = list(self.other_store.fetch_range(key, time_from, time_to))
        for other_time, other_value in matches:
            if self.outer_store is not None:
                self.outer_store.delete(self._outer_key(key, other_time, 1 - self.side))
            self.context.forward(Record(key, self._join(key, value, other_value), max(timestamp, other_time),
                                        record.raw_headers))
        if self.outer and not matches:
            if self.outer_store is None or time_to < tracker.stream_time:
                self.context.forward(record.with_value(self._join(key, value, None)))
            else:
                tracker.min_time = min(tracker.min_time, timestamp)
                self._wait_for_partner(key, value, timestamp)

    # ---- the shared outer store -----------------------------------------------------------------
    def _outer_key(self, key: Any, timestamp: int, side: int) -> bytes:
        return pack_timestamp(timestamp) + bytes([side]) + self.key_serde.serializer().serialize(None, key)

    def _wait_for_partner(self, key: Any, value: Any, timestamp: int) -> None:
        assert self.outer_store is not None
        outer_key = self._outer_key(key, timestamp, self.side)
        raw = self.value_serdes[self.side].serializer().serialize(None, value)
        existing = self.outer_store.get(outer_key)
        self.outer_store.put(outer_key, (existing or b"") + _encode_values([raw]))

    def _lookback(self, side: int) -> int:
        return self.windows.after_ms if side == LEFT_SIDE else self.windows.before_ms

    def _emit_closed_outer_records(self, record: Record) -> None:
        tracker = self.tracker
        grace = self.windows.grace_ms
        if tracker.min_time + self.join_after + grace >= tracker.stream_time:
            return
        assert self.outer_store is not None
        tracker.min_time = NO_TIME
        open_sides: set[int] = set()
        emitted: list[bytes] = []
        for outer_key, data in self.outer_store.all():
            if len(open_sides) == 2:
                break
            timestamp, side = unpack_timestamp(outer_key)[0], outer_key[8]
            tracker.min_time = timestamp
            if timestamp + self._lookback(side) + grace >= tracker.stream_time:
                open_sides.add(side)
                continue
            key = self.key_serde.deserializer().deserialize(None, outer_key[9:])
            deserialize = self.value_serdes[side].deserializer().deserialize
            for raw in _decode_values(data):
                value = deserialize(None, raw)
                joined = self.joiner(key, value, None) if side == LEFT_SIDE else self.joiner(key, None, value)
                self.context.forward(Record(key, joined, timestamp, record.raw_headers))
            emitted.append(outer_key)
        for outer_key in emitted:
            self.outer_store.delete(outer_key)


def stream_stream_join(left: KStream, right: KStream, kind: JoinKind, joiner: Callable[..., Any],
                       windows: JoinWindows | None, stream_joined: StreamJoined | None = None) -> KStream:
    """Wire a windowed stream-stream join: window nodes and stores per side, two join processors,
    a shared outer store for left/outer joins, and a merge node whose stream is returned."""
    if not isinstance(windows, JoinWindows):
        raise TopologyError(f"A KStream-KStream join needs JoinWindows, got {windows!r}; use e.g. "
                            "JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5)).")
    if right.builder is not left.builder:
        raise TopologyError("Cannot join streams of different StreamsBuilders.")
    joined = stream_joined or StreamJoined()
    fn = value_joiner(joiner, f"KStream.{kind.value}")
    builder = left.builder
    key_serde = joined.key_serde or left.key_serde or right.key_serde
    left_serde = joined.value_serde or left.value_serde
    right_serde = joined.other_value_serde or right.value_serde
    prefix = f"KSTREAM-{kind.node_infix}"
    base = joined.name
    parts = (("this-windowed", "KSTREAM-WINDOWED-"), ("other-windowed", "KSTREAM-WINDOWED-"),
             ("this-join", f"{prefix}THIS-"), ("other-join", f"{prefix}OTHER-"), ("merge", "KSTREAM-MERGE-"))
    names = [f"{base}-{suffix}" if base else builder.node_name(None, generated)
             for suffix, generated in parts]
    this_window, other_window, this_join, other_join, merge = names
    if left.repartition_required:
        left = builder.repartition(left.name, f"{this_join}-left", key_serde, left_serde, optimizable=True)
    if right.repartition_required:
        right = builder.repartition(right.name, f"{other_join}-right", key_serde, right_serde,
                                    optimizable=True)
    store_base = joined.store_name
    this_store = f"{store_base}-this-join-store" if store_base else f"{this_join}-store"
    other_store = f"{store_base}-other-join-store" if store_base else f"{other_join}-store"
    given = {"this": joined.this_store_supplier, "other": joined.other_store_supplier}
    for side, supplier in given.items():
        if supplier is not None:
            _check_join_store_supplier(side, supplier, windows)
    this_store = given["this"].name if given["this"] is not None else this_store
    other_store = given["other"].name if given["other"] is not None else other_store
    if this_store == other_store:
        raise TopologyError(f"Both sides of the join would be buffered in store {this_store!r}: give the "
                            "store suppliers different names.")
    outer_store = None
    if kind is not JoinKind.INNER:
        outer_store = f"{store_base}-outer-shared-join-store" if store_base else \
            builder.node_name(None, "KSTREAM-OUTERSHARED-") + "-store"
    b = builder.internal
    store_type = joined.dsl_store_suppliers
    materialized = Materialized().with_store_type(store_type) if store_type is not None else None
    for store_name, value_serde, supplier in ((this_store, left_serde, given["this"]),
                                              (other_store, right_serde, given["other"])):
        if supplier is not None:
            store = builders.window_store_builder(supplier, key_serde, value_serde)
        else:
            store = dsl_store_builder(
                materialized, partial(_join_window_supplier, store_name, windows),
                lambda chosen, v=value_serde: builders.window_store_builder(chosen, key_serde, v))
        b.add_state_store(store if joined.logging_enabled else store.with_logging_disabled())
    if outer_store is not None:
        store = dsl_store_builder(materialized, partial(key_value_supplier, outer_store),
                                  lambda chosen: Stores.key_value_store_builder(chosen, Serdes.ByteArray(),
                                                                                Serdes.ByteArray()))
        b.add_state_store(store if joined.logging_enabled else store.with_logging_disabled())
    trackers: dict[str, TimeTracker] = {}
    serdes = (key_serde, left_serde, right_serde)
    b.add_processor(this_window, lambda: KStreamJoinWindow(this_store), left.name)
    b.add_processor(other_window, lambda: KStreamJoinWindow(other_store), right.name)
    left_outer, right_outer = kind is not JoinKind.INNER, kind is JoinKind.OUTER
    b.add_processor(this_join, lambda: KStreamKStreamJoinSide(
        True, other_store, outer_store, windows, fn, left_outer, trackers, serdes), this_window)
    b.add_processor(other_join, lambda: KStreamKStreamJoinSide(
        False, this_store, outer_store, windows, fn, right_outer, trackers, serdes), other_window)
    b.connect_processor_and_state_stores(this_window, this_store)
    b.connect_processor_and_state_stores(other_window, other_store)
    for join_node, store_names in ((this_join, [other_store]), (other_join, [this_store])):
        b.connect_processor_and_state_stores(join_node, *store_names, *([outer_store] if outer_store else []))
    b.add_processor(merge, PassThrough, this_join, other_join)
    if left_outer:
        builder.null_key_joins.add(merge)
    b.copartition(left.source_topics | right.source_topics)
    return builder.new_stream(merge, key_serde, None, source_topics=left.source_topics | right.source_topics)


def _check_join_store_supplier(side: str, supplier: Any, windows: JoinWindows) -> None:
    """Kafka's checks of a join's window store supplier: it keeps duplicates and fits the join window."""
    if not isinstance(supplier, builders.WindowBytesStoreSupplier):
        raise TopologyError(f"with_{side}_store_supplier takes a window store supplier "
                            f"(Stores.persistent_window_store / in_memory_window_store), got {supplier!r}.")
    if not supplier.retain_duplicates:
        raise TopologyError(f"The {side} join store {supplier.name!r} must retain duplicates "
                            "(retain_duplicates=True).")
    if supplier.window_size_ms != windows.size() or supplier.retention_ms != windows.retention_ms():
        raise TopologyError(f"The {side} join store {supplier.name!r} must have window size {windows.size()} "
                            f"ms and retention {windows.retention_ms()} ms (the join window before + after, "
                            f"and + grace); it has {supplier.window_size_ms} and {supplier.retention_ms} ms.")


def _join_window_supplier(store_name: str, windows: JoinWindows, store_type: StoreType) -> Any:
    factory = builders.in_memory_window_store if store_type is StoreType.IN_MEMORY \
        else builders.persistent_window_store
    return factory(store_name, windows.retention_ms(), windows.size(), retain_duplicates=True)

