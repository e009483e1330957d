"""KTable processors: sources, filter, map_values, transform_values, to_stream, the group_by re-keying,
and the tuple forwarder that forwards Change records directly or, when the store caches, on cache flush
(Kafka Streams' TimestampedTupleForwarder: a cached table forwards only what the cache evicts or
flushes, so downstream sees one update per key per flush)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from strom.streams.internals.compiled import prefixed
from strom.streams.internals.tuples import new_tuple
from strom.streams.kstream.change import Change, OutOfOrderChange
from strom.streams.kstream.internals.value_getter import UNKNOWN_TIMESTAMP, DerivedValueGetter, ValueGetter
from strom.streams.processor.api import Processor, Record
from strom.streams.processor.internals.fusion import FusedStep
from strom.streams.state.context import RecordContext
from strom.streams.state.internals.metered import MeteredVersionedKeyValueStore
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.versioned import PUT_RETURN_CODE_NOT_PUT, PUT_RETURN_CODE_VALID_TO_UNDEFINED

log = logging.getLogger(__name__)

KV = Callable[[Any, Any], Any]


class TimestampedTupleForwarder:
    """Kafka's TimestampedTupleForwarder: with a caching store, updates are forwarded by the store's flush
    listener when the cache evicts or flushes; without, ``maybe_forward`` forwards each update now."""

    def __init__(self, store: Any, context: Any, send_old_values: bool) -> None:
        self.context = context
        self.task = context.task  # its record context's headers are read per forward (no property call)
        self.forward = context.forwarder
        self.send_old_values = send_old_values
        self.caching = store.set_flush_listener(self._flushed, send_old_values)
        fuse_flush = getattr(store, "fuse_flush", None)
        if self.caching and not send_old_values and fuse_flush is not None:
            forward_lines, forward_names = prefixed(*context.fused_forward_flushed(), "{p}f_")
            # _flushed of key k, value n (no old value), timestamp t, inlined in the store's fused flush
            fuse_flush(("fv = {p}new_tuple({p}Change, (n, None))", *forward_lines),
                       {**forward_names, "{p}Change": Change, "{p}new_tuple": new_tuple})

    def _flushed(self, key: Any, new: Any, old: Any, timestamp: int) -> None:
        self.context.forward_flushed(key, new_tuple(Change, (new, old)), timestamp)

    def maybe_forward(self, key: Any, new: Any, old: Any, timestamp: int, latest: bool = True) -> None:
        if not self.caching:
            kind = Change if latest else OutOfOrderChange
            change = new_tuple(kind, (new, old if self.send_old_values else None))
            self.forward(new_tuple(Record, (key, change, timestamp, self.task.record_context.headers)))


class KTableProcessorSupplier:
    """Makes a table processor per task. ``send_old_values`` may be switched on by downstream operators
    (e.g. KTable.group_by needs old values to subtract) until the topology is built."""

    def __init__(
        self, factory: Callable[[KTableProcessorSupplier], Processor], store_name: str | None
    ) -> None:
        self.factory = factory
        self.store_name = store_name
        self.send_old_values = False

    def __call__(self) -> Processor:
        return self.factory(self)


class _StoreBacked(Processor):
    """A table processor that may keep its result in a store (materialized) and forward via the cache."""

    def __init__(self, supplier: KTableProcessorSupplier) -> None:
        self.supplier = supplier
        self.store: Any = None
        self.forwarder: TimestampedTupleForwarder | None = None

    def init(self, context: Any) -> None:
        self.context = context
        if self.supplier.store_name is not None:
            self.store = context.get_state_store(self.supplier.store_name)
            self.versioned = isinstance(self.store, MeteredVersionedKeyValueStore)
            self.forwarder = TimestampedTupleForwarder(self.store, context, self.supplier.send_old_values)

    def emit(self, key: Any, new: Any, old: Any, record: Record, latest: bool = True) -> None:
        """Stores (when materialized) and forwards Change(new, old) with ``record``'s timestamp and
        headers. A versioned store decides whether the update is its key's latest version: if not, it
        goes into the history and downstream as an OutOfOrderChange (KIP-914); one older than the history
        retention is neither stored nor forwarded. An unstored table passes on its input's ``latest``."""
        timestamp = record.timestamp
        if self.forwarder is not None:
            if not self.versioned:
                self.store.put(key, ValueAndTimestamp.make(new, timestamp))
                latest = True
            else:
                code = self.store.put(key, new, timestamp)
                if code == PUT_RETURN_CODE_NOT_PUT:
                    return
                latest = code == PUT_RETURN_CODE_VALID_TO_UNDEFINED
            self.forwarder.maybe_forward(key, new, old, timestamp, latest)
        else:
            kind = Change if latest else OutOfOrderChange
            change = kind(new, old if self.supplier.send_old_values else None)
            # the record's headers, not the record context's: a suppress or a punctuation upstream may
            # forward a record other than the one being processed (Kafka forwards record.withValue)
            self.context.forward(new_tuple(Record, (key, change, timestamp, record.raw_headers)))


class KTableSource(_StoreBacked):
    """Reads a topic as a table: null keys are dropped; a tombstone (None value) deletes the key."""

    def process(self, record: Record) -> None:
        if record.key is None:
            log.warning("Skipping a KTable record with a null key (topic %s)", self.context.record_metadata())
            self.context.metrics.dropped_records += 1
            return
        old = None
        if self.store is not None:
            previous = self.store.get(record.key)
            old = None if previous is None else previous.value
        self.emit(record.key, record.value, old, record)


class KTableFilter(_StoreBacked):
    """``versioned_semantics`` (its input is a versioned table, KIP-914): a deletion of a row the filter
    never let through still goes downstream (Kafka drops it only for unversioned tables)."""

    def __init__(self, supplier: KTableProcessorSupplier, predicate: KV, keep_when: bool,
                 versioned_semantics: bool = False) -> None:
        super().__init__(supplier)
        self.predicate = predicate
        self.keep_when = keep_when
        self.versioned_semantics = versioned_semantics

    def _compute(self, key: Any, value: Any) -> Any:
        if value is None or bool(self.predicate(key, value)) is not self.keep_when:
            return None
        return value

    def process(self, record: Record) -> None:
        change: Change = record.value
        new = self._compute(record.key, change.new_value)
        old = None
        if self.supplier.send_old_values:
            if self.store is not None:
                previous = self.store.get(record.key)
                old = None if previous is None else previous.value
            else:
                old = self._compute(record.key, change.old_value)
            if new is None and old is None and not self.versioned_semantics:
                return
        self.emit(record.key, new, old, record, change.is_latest)


class KTableFilterValueGetter(DerivedValueGetter):
    """The parent's value if the filter keeps it, else None."""

    def __init__(self, parent: ValueGetter, predicate: KV, keep_when: bool) -> None:
        super().__init__(parent)
        self.predicate = predicate
        self.keep_when = keep_when

    def get(self, key: Any, as_of: int | None = None) -> Any:
        found = self.parent.get(key, as_of)
        if found is None or bool(self.predicate(key, found.value)) is not self.keep_when:
            return None
        return found


class KTableMapValues(_StoreBacked):
    def __init__(self, supplier: KTableProcessorSupplier, mapper: KV) -> None:
        super().__init__(supplier)
        self.mapper = mapper

    def _compute(self, key: Any, value: Any) -> Any:
        return None if value is None else self.mapper(key, value)

    def process(self, record: Record) -> None:
        change: Change = record.value
        new = self._compute(record.key, change.new_value)
        old = None
        if self.store is not None:
            previous = self.store.get(record.key)
            old = None if previous is None else previous.value
        elif self.supplier.send_old_values:
            old = self._compute(record.key, change.old_value)
        self.emit(record.key, new, old, record, change.is_latest)


class KTableMapValuesValueGetter(DerivedValueGetter):
    """The parent's value mapped, with the parent's timestamp."""

    def __init__(self, parent: ValueGetter, mapper: KV) -> None:
        super().__init__(parent)
        self.mapper = mapper

    def get(self, key: Any, as_of: int | None = None) -> Any:
        found = self.parent.get(key, as_of)
        if found is None:
            return None
        return ValueAndTimestamp.make(self.mapper(key, found.value), found.timestamp)


class KTableTransformValues(KTableMapValues):
    """KTable.transform_values: one ValueTransformerWithKey per task. As in Kafka Streams it also sees
    deletions (value None), and a None result deletes the row."""

    def __init__(self, supplier: KTableProcessorSupplier, transformer: Any) -> None:
        super().__init__(supplier, transformer.transform)
        self.transformer = transformer

    def _compute(self, key: Any, value: Any) -> Any:
        return self.mapper(key, value)

    def init(self, context: Any) -> None:
        super().init(context)
        self.transformer.init(context)

    def close(self) -> None:
        self.transformer.close()


class KTableTransformValuesGetter(DerivedValueGetter):
    """The parent's value (or None) through a transformer of its own, as Kafka's getter has."""

    def __init__(self, parent: ValueGetter, transformer: Any) -> None:
        super().__init__(parent)
        self.transformer = transformer

    def init(self, context: Any) -> None:
        super().init(context)
        self.task = context.task
        self.transformer.init(context)

    def get(self, key: Any, as_of: int | None = None) -> Any:
        """The transformer runs in a substitute record context, as in Kafka: the parent value's
        timestamp, no topic, partition or offset, no headers (not the reading record's)."""
        found = self.parent.get(key, as_of)
        timestamp = UNKNOWN_TIMESTAMP if found is None else found.timestamp
        task = self.task
        reading = task.record_context
        task.record_context = RecordContext(timestamp)
        try:
            value = self.transformer.transform(key, None if found is None else found.value)
        finally:
            task.record_context = reading
        return ValueAndTimestamp.make(value, timestamp)

    def close(self) -> None:
        super().close()
        self.transformer.close()


class KTableToStream(Processor):
    """Forwards each update's new value (None for a deletion) as a stream record."""

    def init(self, context: Any) -> None:
        self.context = context
        self.forward = context.forwarder

    def process(self, record: Record) -> None:
        self.forward(
            new_tuple(Record, (record.key, record.value.new_value, record.timestamp, record.raw_headers))
        )

    def fused_step(self) -> FusedStep:
        return FusedStep(("v = v.new_value",), {})


class KTableRepartitionMap(Processor):
    """KTable.group_by: re-keys an update. When the old and the new value select the same key, one record
    (key, Change(new, old)) lets the aggregation subtract and add in one step, as Kafka Streams does
    (KIP-904); else (old key, Change(None, old)) then (new key, Change(new, None)). A pair whose key or
    value is None is not forwarded."""

    def __init__(self, selector: KV) -> None:
        self.selector = selector

    def process(self, record: Record) -> None:
        change: Change = record.value
        if not change.is_latest:
            return  # a versioned table's out-of-order update (KIP-914)
        old = None if change.old_value is None else self.selector(record.key, change.old_value)
        new = None if change.new_value is None else self.selector(record.key, change.new_value)
        old_ok = old is not None and old[0] is not None and old[1] is not None
        new_ok = new is not None and new[0] is not None and new[1] is not None
        forward, timestamp, headers = self.context.forward, record.timestamp, record.raw_headers
        if old_ok and new_ok and old[0] == new[0]:
            forward(new_tuple(Record, (new[0], Change(new[1], old[1]), timestamp, headers)))
            return
        if old_ok:
            forward(new_tuple(Record, (old[0], Change(None, old[1]), timestamp, headers)))
        if new_ok:
            forward(new_tuple(Record, (new[0], Change(new[1], None), timestamp, headers)))
