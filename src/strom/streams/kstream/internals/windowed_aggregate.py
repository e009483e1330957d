"""Processors of windowed aggregations: Kafka's KStreamWindowAggregate and KStreamSessionWindowAggregate.

Both forward ``Change(new, old)`` records keyed by ``Windowed(key, window)``, as a windowed KTable.
Records with a null key or value are skipped. A record whose windows are already closed (window
end + grace <= the stream time this processor has observed) is dropped and counted in the task's
``dropped_records`` metric, as Kafka Streams does. With a cached window store, results go downstream
when the cache flushes (once per commit); otherwise every update is forwarded at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from strom.streams.kstream.change import Change
from strom.streams.kstream.windows import SessionWindow, SessionWindows, TimeWindows, Window, Windowed
from strom.streams.processor.api import Processor, Record
from strom.streams.state.timestamped import ValueAndTimestamp

log = logging.getLogger(__name__)

Initializer = Callable[[], Any]
Aggregator = Callable[[Any, Any, Any], Any]
Merger = Callable[[Any, Any, Any], Any]


class _WindowedProcessor(Processor):
    def __init__(self, store_name: str, send_old_values: bool) -> None:
        self.store_name = store_name
        self.send_old_values = send_old_values
        self.observed_stream_time = -1
        self.dropped_records = 0

    def _drop(self, record: Record, reason: str) -> None:
        self.dropped_records += 1
        self.context.metrics.dropped_records += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Skipping record %r of store %s: %s", record, self.store_name, reason)


class KStreamWindowAggregate(_WindowedProcessor):
    """Aggregates each record into every time window (tumbling or hopping) that contains it."""

    def __init__(
        self,
        windows: TimeWindows,
        store_name: str,
        initializer: Initializer,
        aggregator: Aggregator,
        send_old_values: bool = False,
    ) -> None:
        super().__init__(store_name, send_old_values)
        self.windows = windows
        self.tumbling = windows.advance_ms == windows.size_ms
        self.initializer = initializer
        self.aggregator = aggregator

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)
        self.cached = self.store.set_flush_listener(self._forward_flushed, self.send_old_values)

    def _forward_flushed(self, windowed: Windowed[Any], new: Any, old: Any, timestamp: int) -> None:
        self.context.forward(Record(windowed, Change(new, old), timestamp))

    def process(self, record: Record) -> None:
        key = record.key
        if key is None or record.value is None:
            self._drop(record, "null key or value")
            return
        timestamp = record.timestamp
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        close_time = self.observed_stream_time - self.windows.grace_ms
        store = self.store
        windows = self.windows
        if self.tumbling and timestamp >= 0:
            start = timestamp - timestamp % windows.size_ms
            matched: Any = ((start, Window(start, start + windows.size_ms)),)
        else:
            matched = windows.windows_for(timestamp).items()
        for window_start, window in matched:
            if window.end <= close_time:
                self._drop(
                    record,
                    f"window [{window.start}, {window.end}) closed at stream time "
                    f"{self.observed_stream_time}",
                )
                continue
            old = store.fetch(key, window_start)
            if old is None:
                aggregate, new_timestamp = self.initializer(), timestamp
            else:
                aggregate, new_timestamp = old.value, max(timestamp, old.timestamp)
            new_aggregate = self.aggregator(key, record.value, aggregate)
            store.put(key, ValueAndTimestamp(new_aggregate, new_timestamp), window_start)
            if not self.cached:
                old_value = old.value if old is not None and self.send_old_values else None
                self.context.forward(
                    Record(
                        Windowed(key, window), Change(new_aggregate, old_value), new_timestamp, record.headers
                    )
                )


class KStreamSessionWindowAggregate(_WindowedProcessor):
    """Merges each record with the sessions of its key that lie within the inactivity gap."""

    def __init__(
        self,
        windows: SessionWindows,
        store_name: str,
        initializer: Initializer,
        aggregator: Aggregator,
        merger: Merger,
        send_old_values: bool = False,
    ) -> None:
        super().__init__(store_name, send_old_values)
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        key = record.key
        if key is None or record.value is None:
            self._drop(record, "null key or value")
            return
        timestamp = record.timestamp
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        close_time = self.observed_stream_time - self.windows.grace_ms
        gap = self.windows.gap_ms
        merged = list(self.store.find_sessions(key, timestamp - gap, timestamp + gap))
        aggregate = self.initializer()
        start, end = timestamp, timestamp
        for session, value in merged:
            aggregate = self.merger(key, aggregate, value)
            start, end = min(start, session.window.start), max(end, session.window.end)
        if end < close_time:
            self._drop(record, f"session [{start}, {end}] closed at stream time {self.observed_stream_time}")
            return
        for session, value in merged:
            self.store.remove(session)
            self._forward(session, None, value, record)
        aggregate = self.aggregator(key, record.value, aggregate)
        window = Windowed(key, SessionWindow(start, end))
        self.store.put(window, aggregate)
        self._forward(window, aggregate, None, record)

    def _forward(self, session: Windowed[Any], new: Any, old: Any, record: Record) -> None:
        change = Change(new, old if self.send_old_values else None)
        self.context.forward(Record(session, change, session.window.end, record.headers))
