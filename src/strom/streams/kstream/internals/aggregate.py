"""Aggregation processors: KStream aggregate/reduce (count is an aggregate) and KTable aggregate/reduce
with subtractors. Results live in a timestamped store, or a versioned one (which refuses, and so does not
forward, an aggregate older than its history retention), and are forwarded through the tuple forwarder."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from strom.streams.internals.tuples import new_tuple
from strom.streams.kstream.change import Change
from strom.streams.kstream.internals.functions import count_aggregator, count_initializer
from strom.streams.kstream.internals.table import KTableProcessorSupplier, TimestampedTupleForwarder
from strom.streams.processor.api import Processor, Record
from strom.streams.processor.internals.fusion import FusedStep
from strom.streams.state.internals.metered import MeteredVersionedKeyValueStore
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.versioned import PUT_RETURN_CODE_NOT_PUT

log = logging.getLogger(__name__)

AGGREGATE_LINES = (
    "if r is None:",
    "    n = {p}aggregator(k, v, {p}initializer())",
    "else:",
    "    n = {p}aggregator(k, v, rv)",
    "    if rt > t:",
    "        t = rt",
)
"""An aggregate's update in a fused step: from the record (``k, v, t``) and the previous aggregate
(``rv`` with timestamp ``rt``, when ``r`` is not None) the new aggregate ``n`` at timestamp ``t``, the
later of the two (the names ``{p}aggregator`` and ``{p}initializer`` bound by the step)."""
_COUNT_LINES = (
    "if r is None:",
    "    n = 1",  # count_aggregator(k, v, count_initializer())
    "else:",
    "    n = rv + 1",  # count_aggregator(k, v, rv)
    "    if rt > t:",
    "        t = rt",
)
"""``AGGREGATE_LINES`` of ``count``, its two functions inlined."""


class _Aggregating(Processor):
    def __init__(self, supplier: KTableProcessorSupplier) -> None:
        self.supplier = supplier

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store(self.supplier.store_name)
        self.forwarder = TimestampedTupleForwarder(self.store, context, self.supplier.send_old_values)
        # a read then a write of the same key per record: one fused path through the cache when cached
        fused = getattr(self.store, "read_modify_write", None)
        self.get, self.put = fused() if fused is not None else (self.store.get, self.store.put)
        if isinstance(self.store, MeteredVersionedKeyValueStore):
            self.put = self._put_version
        self.forward_each = not self.forwarder.caching

    def _put_version(self, key: Any, aggregate: ValueAndTimestamp) -> int:
        """``put`` into a versioned store: its return code (PUT_RETURN_CODE_NOT_PUT: not stored)."""
        return self.store.put(key, aggregate.value, aggregate.timestamp)

    def _skip(self, record: Record, what: str) -> None:
        log.debug("Skipping record with null %s in %s", what, self.supplier.store_name)
        self.context.metrics.dropped_records += 1


class _StreamAggregating(_Aggregating):
    """A KStream aggregation: records with a null key or value are skipped, the others ``update``
    their key's aggregate (KStreamAggregate, KStreamReduce)."""

    def update(self, key: Any, value: Any, timestamp: int) -> None:
        raise NotImplementedError

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            self._skip(record, "key or value")
            return
        self.update(record.key, record.value, record.timestamp)

    _compute: tuple[str, ...] = ()
    """``update`` as lines for the fused step: from ``k``, ``v``, ``t`` and the key's previous aggregate
    ``rv`` and its timestamp ``rt`` (when ``r`` is not None) set ``n``, the new aggregate, and ``t``,
    its timestamp."""

    def fused_step(self) -> FusedStep:
        """The end of its source's fused chain: no Record and no forward call per record. Over a cached
        store the read, the aggregation and the write are inlined (the store's fused read-modify-write
        lines around ``_compute``); otherwise the step calls ``update`` (which forwards each update
        with the task's record context, set for this record)."""
        lines = ["if k is None or v is None:",
                 "    {p}process(_new_tuple(_Record, (k, v, t, h)))",
                 "    return"]
        names: dict[str, Any] = {"{p}process": self.process, "{p}update": self.update,
                                 **self._compute_names()}
        fused = getattr(self.store, "fused_timestamped_update", None)
        inlined = None if self.forward_each or fused is None else fused()
        if inlined is None:
            lines.append("{p}update(k, v, t)")
        else:
            read, write, store_names = inlined
            names.update(store_names)
            lines += [*read, *self._compute, *write]
        return FusedStep(tuple(lines), {name[3:]: value for name, value in names.items()}, terminal=True)

    def _compute_names(self) -> dict[str, Any]:
        return {}


class KStreamAggregate(_StreamAggregating):
    """``aggregate``: new = aggregator(key, value, old or initializer()). Null keys and values are skipped."""

    def __init__(
        self,
        supplier: KTableProcessorSupplier,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(supplier)
        self.initializer = initializer
        self.aggregator = aggregator
        if initializer is count_initializer and aggregator is count_aggregator:
            self._compute = _COUNT_LINES

    _compute = AGGREGATE_LINES

    def _compute_names(self) -> dict[str, Any]:
        return {"{p}aggregator": self.aggregator, "{p}initializer": self.initializer}

    def update(self, key: Any, value: Any, timestamp: int) -> None:
        previous = self.get(key)
        if previous is None:
            # a new key's old value is the initial aggregate, as Kafka Streams forwards it uncached
            old = aggregate = self.initializer()
        else:
            old = aggregate = previous[0]
            if previous[1] > timestamp:
                timestamp = previous[1]
        new = self.aggregator(key, value, aggregate)
        stored = self.put(key, new_tuple(ValueAndTimestamp, (new, timestamp)))
        if self.forward_each and stored != PUT_RETURN_CODE_NOT_PUT:
            self.forwarder.maybe_forward(key, new, old, timestamp)


class KStreamReduce(_StreamAggregating):
    """``reduce``: a key's first value is its aggregate; later ones are combined by reducer(agg, value)."""

    def __init__(self, supplier: KTableProcessorSupplier, reducer: Callable[[Any, Any], Any]) -> None:
        super().__init__(supplier)
        self.reducer = reducer

    _compute = (
        "if r is None:",
        "    n = v",
        "else:",
        "    n = {p}reducer(rv, v)",
        "    if rt > t:",
        "        t = rt",
    )

    def _compute_names(self) -> dict[str, Any]:
        return {"{p}reducer": self.reducer}

    def update(self, key: Any, value: Any, timestamp: int) -> None:
        previous = self.get(key)
        if previous is None:
            old, new = None, value
        else:
            old = previous[0]
            new = self.reducer(old, value)
            if previous[1] > timestamp:
                timestamp = previous[1]
        stored = self.put(key, new_tuple(ValueAndTimestamp, (new, timestamp)))
        if self.forward_each and stored != PUT_RETURN_CODE_NOT_PUT:
            self.forwarder.maybe_forward(key, new, old, timestamp)


class _TableAggregating(_Aggregating):
    """A KGroupedTable aggregation: every change of the table updates its key's aggregate."""

    def _previous(self, key: Any, timestamp: int) -> tuple[Any, int]:
        """The key's aggregate so far (None if it has none) and the result's timestamp."""
        previous = self.store.get(key)
        if previous is None:
            return None, timestamp
        return previous.value, max(timestamp, previous.timestamp)

    def _update(self, key: Any, aggregate: Any, old: Any, timestamp: int) -> None:
        if isinstance(self.store, MeteredVersionedKeyValueStore):
            if self.store.put(key, aggregate, timestamp) == PUT_RETURN_CODE_NOT_PUT:
                return
        else:
            self.store.put(key, ValueAndTimestamp.make(aggregate, timestamp))
        self.forwarder.maybe_forward(key, aggregate, old, timestamp)


class KTableAggregate(_TableAggregating):
    """KGroupedTable.aggregate: subtract the old value, then add the new one."""

    def __init__(
        self,
        supplier: KTableProcessorSupplier,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(supplier)
        self.initializer = initializer
        self.adder = adder
        self.subtractor = subtractor

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            self._skip(record, "key")
            return
        change: Change = record.value
        old, timestamp = self._previous(key, record.timestamp)
        aggregate = old
        if change.old_value is not None and old is not None:  # nothing to subtract from: as Kafka's
            aggregate = self.subtractor(key, change.old_value, old)
        if change.new_value is not None:
            start = self.initializer() if aggregate is None else aggregate
            aggregate = self.adder(key, change.new_value, start)
        self._update(key, aggregate, old, timestamp)


class KTableReduce(_TableAggregating):
    """KGroupedTable.reduce: remove the old value with the subtractor, then add the new with the adder;
    an aggregate that becomes None deletes the key."""

    def __init__(
        self,
        supplier: KTableProcessorSupplier,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
    ) -> None:
        super().__init__(supplier)
        self.adder = adder
        self.subtractor = subtractor

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            self._skip(record, "key")
            return
        change: Change = record.value
        old, timestamp = self._previous(key, record.timestamp)
        aggregate = old
        if change.old_value is not None and aggregate is not None:
            aggregate = self.subtractor(aggregate, change.old_value)
        if change.new_value is not None:
            aggregate = change.new_value if aggregate is None else self.adder(aggregate, change.new_value)
        self._update(key, aggregate, old, timestamp)
