"""``KTable.suppress``: Kafka's KTableSuppressProcessor over a time-ordered, logged buffer.

Updates wait in the buffer under their buffer time: the window end (``until_window_closes``) or the
record time (``until_time_limit``). A buffered update is emitted once stream time reaches buffer time
+ grace (window closed) or + the time limit; the latest update per key wins. A full buffer either
emits its oldest records early or stops the application with SuppressionBufferFullError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strom.errors import SuppressionBufferFullError, TopologyError
from strom.streams.kstream.change import Change
from strom.streams.kstream.internals.table import KTableProcessorSupplier
from strom.streams.kstream.internals.value_getter import UNKNOWN_TIMESTAMP, DerivedValueGetter, ValueGetter
from strom.streams.kstream.options import Named
from strom.streams.kstream.suppressed import BufferFullStrategy, Suppressed
from strom.streams.kstream.windows import SessionWindows
from strom.streams.processor.api import Processor, Record
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.window.suppression_buffer import BufferedRecord, SuppressionBufferBuilder

if TYPE_CHECKING:
    from strom.streams.kstream.ktable import KTable


class KTableSuppressProcessor(Processor):
    """Buffers updates and emits them when due."""

    def __init__(self, store_name: str, suppressed: Suppressed, suppress_duration_ms: int) -> None:
        self.store_name = store_name
        self.suppressed = suppressed
        self.suppress_duration_ms = suppress_duration_ms
        self.observed_stream_time = -1

    def init(self, context: Any) -> None:
        self.context = context
        self.buffer = context.get_state_store(self.store_name)
        config = self.suppressed.buffer_config
        self.record_limit = config.record_limit
        self.byte_limit = config.byte_limit
        self.emit_when_full = config.strategy is BufferFullStrategy.EMIT

    def process(self, record: Record) -> None:
        if record.timestamp > self.observed_stream_time:
            self.observed_stream_time = record.timestamp
        change: Change = record.value
        buffer_time = record.key.window.end if self.suppressed.final_results else record.timestamp
        self.buffer.put(buffer_time, record.key, change.new_value, change.old_value, record.timestamp,
                        record.raw_headers)
        expiry = self.observed_stream_time - self.suppress_duration_ms
        buffer = self.buffer
        buffer.evict_while(lambda: buffer.min_timestamp() <= expiry, self._emit)
        if self._over_capacity():
            if not self.emit_when_full:
                raise SuppressionBufferFullError(
                    f"Suppression buffer {self.store_name!r} exceeded its capacity ({len(buffer)} records, "
                    f"{buffer.size_bytes} bytes; limits {self.record_limit} records, "
                    f"{self.byte_limit} bytes) "
                    "and is configured to shut down when full. Raise the limits, or use "
                    "emit_early_when_full() if early results are acceptable.")
            buffer.evict_while(self._over_capacity, self._emit)

    def _over_capacity(self) -> bool:
        buffer = self.buffer
        return (self.record_limit is not None and len(buffer) > self.record_limit) or \
            (self.byte_limit is not None and buffer.size_bytes > self.byte_limit)

    def _emit(self, buffered: BufferedRecord) -> None:
        if buffered.new_value is None and self.suppressed.final_results:
            return  # a final result that is a deletion: nothing was ever emitted for it
        # as Kafka's, the emitted record's context is the buffered record's: a table operator after
        # suppress forwards (or caches) its headers, not the headers of the record that evicted it
        task = self.context.task
        previous = task.record_context
        task.record_context = previous._replace(timestamp=buffered.timestamp, headers=buffered.headers)
        try:
            self.context.forward(Record(buffered.key, Change(buffered.new_value, buffered.old_value),
                                        buffered.timestamp, buffered.headers))
        finally:
            task.record_context = previous


class KTableSuppressValueGetter(DerivedValueGetter):
    """What readers of the suppressed table see (Kafka's suppress ``view()``): for a key waiting in the
    buffer, the value before its first buffered update (its record time unknown); else the parent's."""

    def __init__(self, parent: ValueGetter, store_name: str) -> None:
        super().__init__(parent)
        self.store_name = store_name

    def init(self, context: Any) -> None:
        super().init(context)
        self.buffer = context.get_state_store(self.store_name)

    def get(self, key: Any, as_of: int | None = None) -> Any:
        buffered = self.buffer.buffered(key)
        if buffered is None:
            return self.parent.get(key)
        return ValueAndTimestamp.make(buffered.prior_value, UNKNOWN_TIMESTAMP)


def _window_grace(table: KTable) -> int:
    node: KTable | None = table
    while node is not None:
        windows = node.windows
        if windows is not None:
            # strom's aggregator still merges into a session whose end is stream time - gap - grace
            # (docs/streams.md, session-ending-at-its-close): final only one millisecond later
            if isinstance(windows, SessionWindows):
                return windows.grace_ms + windows.gap_ms + 1
            return windows.grace_ms
        node = node.parent
    raise TopologyError("Suppressed.until_window_closes needs a windowed KTable (from "
                        "group_by_key().windowed_by(...)); use Suppressed.until_time_limit for other tables.")


def suppress(table: KTable, suppressed: Suppressed) -> KTable:
    """``KTable.suppress``: a suppress node and its buffer after ``table``."""
    if not isinstance(suppressed, Suppressed):
        raise TopologyError(f"KTable.suppress needs a Suppressed, got {suppressed!r}.")
    duration = _window_grace(table) if suppressed.final_results else suppressed.time_to_wait_ms
    table.enable_send_old_values()  # the buffer keeps each key's prior value, as Kafka's does
    builder = table.builder
    name = builder.node_name(Named(suppressed.name), "KTABLE-SUPPRESS-")
    store_name = f"{suppressed.name}-store" if suppressed.name else \
        builder.store_name(None, "KTABLE-SUPPRESS-")
    supplier = KTableProcessorSupplier(lambda _: KTableSuppressProcessor(store_name, suppressed, duration),
                                       None)
    builder.internal.add_processor(name, supplier, table.name)
    config = suppressed.buffer_config
    buffer = SuppressionBufferBuilder(store_name, table.key_serde, table.value_serde, config.logging_enabled,
                                      dict(config.log_config))
    builder.internal.add_state_store(buffer, name)
    suppressed_table = builder.new_table(name, supplier, table.key_serde, table.value_serde, None, table,
                                         table.source_topics)
    suppressed_table.view = lambda: table.value_getter().derived(
        lambda parent: KTableSuppressValueGetter(parent, store_name), store_name)
    return suppressed_table
