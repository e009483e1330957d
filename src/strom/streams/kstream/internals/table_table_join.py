"""KTable-KTable joins on the primary key (Kafka's KTableKTableInnerJoin / LeftJoin / RightJoin /
OuterJoin and KTableKTableJoinMerger).

Each side's update ``Change(new, old)`` is joined with the other table's current value; both parent
tables send old values, so a deletion retracts the earlier result with a tombstone. The merger
forwards both sides' results and, when the join is materialized, stores them.
"""

from __future__ import annotations

import enum
from typing import Any

from strom.streams.kstream.change import Change
from strom.streams.kstream.internals.table import KTableProcessorSupplier, TimestampedTupleForwarder
from strom.streams.kstream.join_options import ValueJoiner
from strom.streams.processor.api import Processor, Record
from strom.streams.state.timestamped import ValueAndTimestamp


class SideMode(enum.Enum):
    """How one side treats a missing partner, following Kafka's processor for that side."""

    INNER = "inner"                    # both values needed
    PRESERVE_THIS = "preserve_this"    # left side of a left join
    PRESERVE_OTHER = "preserve_other"  # right side of a left join
    OUTER = "outer"                    # either value is enough


class KTableKTableJoinSide(Processor):
    def __init__(self, other_store: str, joiner: ValueJoiner, this_is_left: bool, mode: SideMode) -> None:
        self.other_store = other_store
        self.joiner = joiner
        self.this_is_left = this_is_left
        self.mode = mode

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store(self.other_store)

    def _join(self, key: Any, this: Any, other: Any) -> Any:
        return self.joiner(key, this, other) if self.this_is_left else self.joiner(key, other, this)

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            self.context.metrics.dropped_records += 1
            return
        change: Change = record.value
        new, old = change.new_value, change.old_value
        current = self.store.get(key)
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
        self.context.forward(Record(key, Change(new_result, old_result), timestamp, record.headers))


class KTableKTableJoinMerger(Processor):
    """Both sides' results in one table; stored (and cache-forwarded) when the join is materialized."""

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
                                        record.headers))
            return
        previous = self.store.get(record.key)
        self.store.put(record.key, ValueAndTimestamp.make(change.new_value, record.timestamp))
        self.forwarder.maybe_forward(record.key, change.new_value,
                                     None if previous is None else previous.value, record.timestamp)
