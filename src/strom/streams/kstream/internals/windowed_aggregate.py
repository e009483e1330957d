"""Processors of windowed aggregations: Kafka's KStreamWindowAggregate and KStreamSessionWindowAggregate.

Both forward ``Change(new, old)`` records keyed by ``Windowed(key, window)``, as a windowed KTable.
Records with a null key are skipped; a null value is aggregated like any other (a count counts it), as
Kafka Streams 4.1.1 does for time and session windows (its sliding windows skip null values). A record
whose windows are already closed (window end + grace <= the stream time this processor has observed) is
dropped and counted in the task's ``dropped_records`` metric, as Kafka Streams does. With a cached
window store, results go downstream when the cache flushes (once per commit); otherwise every update
is forwarded at once.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Any

from strom.streams.internals.tuples import new_tuple
from strom.streams.kstream.change import Change
from strom.streams.kstream.internals.aggregate import AGGREGATE_LINES
from strom.streams.kstream.windows import (
    MAX_TIMESTAMP,
    SessionWindow,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    Windowed,
)
from strom.streams.processor.api import Processor, Record
from strom.streams.processor.internals.fusion import FusedStep
from strom.streams.state.timestamped import ValueAndTimestamp

log = logging.getLogger(__name__)

Initializer = Callable[[], Any]
Aggregator = Callable[[Any, Any, Any], Any]
Merger = Callable[[Any, Any, Any], Any]


class _WindowedProcessor(Processor):
    emit_on_close = False
    """EmitStrategy.on_window_close: no update goes downstream, only each window's final result."""

    def __init__(self, store_name: str, send_old_values: bool) -> None:
        self.store_name = store_name
        self.send_old_values = send_old_values
        self.observed_stream_time = -1
        self.dropped_records = 0

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)
        # a lower bound of the stream time this aggregation saw before a restart
        self.observed_stream_time = max(self.observed_stream_time, self.store.observed_stream_time)
        # cached: updates reach downstream when the cache flushes (or, emitting on close, never)
        self.cached = self.emit_on_close or self.store.set_flush_listener(self._forward_flushed,
                                                                          self.send_old_values)
        if self.emit_on_close:
            last = context.processor_metadata_for_key(self.store_name)
            self.emitted_close_time = -1 if last is None else last

    def _closed_starts(self, emitted_close_time: int, close_time: int) -> tuple[int, int] | None:
        """The window starts that closed between the two close times, as an inclusive range (None: none)."""
        raise NotImplementedError

    def _emit_closed(self, close_time: int, record: Record) -> None:
        """EmitStrategy.on_window_close: the final result of every window that closed since the last
        emission. Runs before the record's windows are written: a write far ahead in time would let the
        store expire windows not emitted yet."""
        starts = self._closed_starts(self.emitted_close_time, close_time)
        if starts is not None:
            forward, headers = self.context.forward, record.raw_headers
            key_bytes = self.store.serialized_key
            closed = sorted(self.store.fetch_all(*starts),
                            key=lambda window: (window[0].window.start, key_bytes(window[0].key)))
            for windowed, (value, timestamp) in closed:
                forward(Record(windowed, Change(value, None), timestamp, headers))
        self._emitted_up_to(close_time)

    def _emitted_up_to(self, close_time: int) -> None:
        """Everything closed by ``close_time`` went downstream: kept in the commit metadata, so a task
        opened again does not emit it twice."""
        self.emitted_close_time = close_time
        self.context.add_processor_metadata_key_value(self.store_name, close_time)

    def _forward_flushed(self, windowed: Windowed[Any], new: Any, old: Any, timestamp: int) -> None:
        self.context.forward_flushed(windowed, new_tuple(Change, (new, old)), timestamp)

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
        emit_on_close: bool = False,
    ) -> None:
        super().__init__(store_name, send_old_values)
        self.windows = windows
        self.emit_on_close = emit_on_close
        self.size_ms = windows.size_ms
        self.grace_ms = windows.grace_ms
        self.tumbling = windows.advance_ms == windows.size_ms
        self.initializer = initializer
        self.aggregator = aggregator

    def init(self, context: Any) -> None:
        super().init(context)
        self.fetch, self.put = self.store.fetch, self.store.put  # bound once: used for every record

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            self._drop(record, "null key")
            return
        timestamp = record.timestamp
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        close_time = self.observed_stream_time - self.grace_ms
        if self.emit_on_close and close_time > self.emitted_close_time:
            self._emit_closed(close_time, record)
        size = self.size_ms
        # tumbling: the one window, without asking the spec (the per-record path of a windowed count)
        starts = (timestamp - timestamp % size,) if self.tumbling and timestamp >= 0 \
            else self.windows.windows_for(timestamp)
        for start in starts:
            end = start + size
            if end <= close_time:
                self._drop(record, f"window [{start}, {end}) closed at stream time "
                                   f"{self.observed_stream_time}")
                continue
            old, new, new_timestamp = self.update(key, record.value, timestamp, start)
            if not self.cached:
                old_value = old[0] if old is not None and self.send_old_values else None
                self.context.forward(new_tuple(Record, (Windowed(key, Window(start, end)),
                                                        Change(new, old_value), new_timestamp,
                                                        record.raw_headers)))

    def update(self, key: Any, value: Any, timestamp: int, start: int) -> tuple[Any, Any, int]:
        """Aggregates a record into its window starting at ``start``: (the old ValueAndTimestamp or
        None, the new aggregate, its timestamp)."""
        old = self.fetch(key, start)
        if old is None:
            aggregate, new_timestamp = self.initializer(), timestamp
        else:
            aggregate, new_timestamp = old
            if timestamp > new_timestamp:
                new_timestamp = timestamp
        new = self.aggregator(key, value, aggregate)
        # a None aggregate (a reduce's first value was None) deletes the window, as in Kafka Streams
        self.put(key, None if new is None else new_tuple(ValueAndTimestamp, (new, new_timestamp)), start)
        return old, new, new_timestamp

    def fused_step(self) -> FusedStep | None:
        """Tumbling windows over a cached store (updates go downstream at flush), emitting on update:
        the end of its source's fused chain, no Record and no forward call per record, and the store's
        fetch and put inlined around the aggregation (``fused_window_update``). A record that is not
        the plain case (null key or value, negative timestamp, a closed window) takes ``process``,
        which does what it did (raising the observed stream time again changes nothing)."""
        if not self.tumbling or not self.cached or self.emit_on_close:
            return None
        lines = [
            "if k is None or v is None or t < 0:",
            "    {p}process(_new_tuple(_Record, (k, v, t, h)))",
            "    return",
            "if t > {p}self.observed_stream_time:",
            "    {p}self.observed_stream_time = t",
            "s = t - t % {p}size",
            "if s + {p}size <= {p}self.observed_stream_time - {p}grace:",
            "    {p}process(_new_tuple(_Record, (k, v, t, h)))",  # dropped: a closed window
            "    return",
        ]
        names = {"{p}process": self.process, "{p}update": self.update, "{p}self": self,
                 "{p}size": self.size_ms, "{p}grace": self.grace_ms,
                 "{p}aggregator": self.aggregator, "{p}initializer": self.initializer}
        fused = getattr(self.store, "fused_window_update", None)
        inlined = None if fused is None else fused()
        if inlined is None:  # the store's fetch and put, through update
            lines.append("{p}update(k, v, t, s)")
        else:  # the cached store's fetch and put inlined around the aggregation
            read, write, store_names = inlined
            names.update(store_names)
            lines += [*read, *AGGREGATE_LINES, *write]
        return FusedStep(tuple(lines), {name[3:]: value for name, value in names.items()}, terminal=True)

    def _closed_starts(self, emitted_close_time: int, close_time: int) -> tuple[int, int] | None:
        """A time window is closed once its end (exclusive) <= the close time."""
        size, advance = self.size_ms, self.windows.advance_ms
        first = 0 if emitted_close_time < 0 else emitted_close_time - size + 1
        last = close_time - size
        return (first, last) if -(-first // advance) * advance <= last else None  # a window start in them


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
        emit_on_close: bool = False,
    ) -> None:
        super().__init__(store_name, send_old_values)
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger
        self.emit_on_close = emit_on_close
        # emitting on close: the sessions not emitted yet, by end (a merged-away one stays until popped)
        self._unemitted: list[tuple[int, int, Windowed[Any]]] = []
        self._sequence = itertools.count()

    def init(self, context: Any) -> None:
        super().init(context)
        if self.emit_on_close:
            for session, _ in self.store.find_sessions_key_range(None, None, max(0, self.emitted_close_time),
                                                                 MAX_TIMESTAMP):
                self._remember(session)

    def _remember(self, session: Windowed[Any]) -> None:
        heapq.heappush(self._unemitted, (session.window.end, next(self._sequence), session))

    def process(self, record: Record) -> None:
        key = record.key
        if key is None:
            self._drop(record, "null key")
            return
        timestamp = record.timestamp
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        gap = self.windows.gap_ms
        # a session ending before this may still be joined by a record within the gap: Kafka's close
        # time for sessions counts the gap too
        close_time = self.observed_stream_time - self.windows.grace_ms - gap
        # read the closed sessions before this record's write moves the store's time (and may expire them)
        closing = self._closed_sessions(close_time) if self.emit_on_close else None
        merged = list(self.store.find_sessions(key, timestamp - gap, timestamp + gap))
        aggregate = self.initializer()
        start, end = timestamp, timestamp
        for session, value in merged:
            aggregate = self.merger(key, aggregate, value)
            start, end = min(start, session.window.start), max(end, session.window.end)
        if end < close_time:
            self._drop(record, f"session [{start}, {end}] closed at stream time {self.observed_stream_time}")
        else:
            if (start, end) != (timestamp, timestamp):  # else the one session is written over, as in Kafka
                for session, value in merged:
                    self.store.remove(session)
                    self._forward(session, None, value, record)
            aggregate = self.aggregator(key, record.value, aggregate)
            window = Windowed(key, SessionWindow(start, end))
            if aggregate is None:  # a reduce's first value was None: no session, as in Kafka Streams
                self.store.remove(window)
            else:
                self.store.put(window, aggregate)
            self._forward(window, aggregate, None, record)
            if self.emit_on_close:
                self._remember(window)
        if closing is not None:
            self._emit_final(closing, {session for session, _ in merged}, close_time, record)

    def _closed_sessions(self, close_time: int) -> list[tuple[Windowed[Any], Any]] | None:
        """The sessions ending before ``close_time`` not emitted yet, with their aggregates (sessions
        merged away are gone from the store); None when the close time has not moved."""
        if close_time <= self.emitted_close_time:
            return None
        closing: dict[Windowed[Any], Any] = {}  # a session re-written in place is remembered twice
        while self._unemitted and self._unemitted[0][0] < close_time:
            session = heapq.heappop(self._unemitted)[2]
            value = self.store.fetch_session(session.key, session.window.start, session.window.end)
            if value is not None:
                closing[session] = value
        key_bytes = self.store.serialized_key
        return sorted(closing.items(), key=lambda session: (
            session[0].window.end, session[0].window.start, key_bytes(session[0].key)))

    def _emit_final(self, closing: list[tuple[Windowed[Any], Any]], merged_now: set[Windowed[Any]],
                    close_time: int, record: Record) -> None:
        """EmitStrategy.on_window_close: each closed session once, at its end (as Kafka: after the
        record, so a session this record merged into a new one is not emitted)."""
        for session, value in closing:
            if session not in merged_now:
                self.context.forward(Record(session, Change(value, None), session.window.end,
                                            record.raw_headers))
        self._emitted_up_to(close_time)

    def _forward(self, session: Windowed[Any], new: Any, old: Any, record: Record) -> None:
        if self.cached:
            return  # the cache forwards what is left of these updates when it flushes
        change = Change(new, old if self.send_old_values else None)
        # a new record, without the input's headers, as Kafka Streams forwards an uncached session update
        self.context.forward(Record(session, change, session.window.end))


class KStreamSlidingWindowAggregate(_WindowedProcessor):
    """Sliding windows (Kafka's KStreamSlidingWindowAggregate): windows of ``time_difference`` that
    exist only where records are, each record's "left" window ``[t - d, t]`` and, when later records
    fall in it, its "right" window ``[t + 1, t + 1 + d]``. Records before ``d`` share ``[0, d]``."""

    def __init__(self, windows: SlidingWindows, store_name: str, initializer: Initializer,
                 aggregator: Aggregator, send_old_values: bool = False, emit_on_close: bool = False) -> None:
        super().__init__(store_name, send_old_values)
        self.windows = windows
        self.emit_on_close = emit_on_close
        self.difference = windows.time_difference_ms
        self.initializer = initializer
        self.aggregator = aggregator

    def process(self, record: Record) -> None:
        if record.key is None or record.value is None:
            self._drop(record, "null key or value")
            return
        timestamp = record.timestamp
        if timestamp > self.observed_stream_time:
            self.observed_stream_time = timestamp
        close_time = self.observed_stream_time - self.windows.grace_ms
        late, early = timestamp + 1 + self.difference <= close_time, timestamp < self.difference
        # as in Kafka Streams, neither a late record nor one in the first time difference emits
        if self.emit_on_close and not late and not early and close_time > self.emitted_close_time:
            self._emit_closed(close_time, record)
        if late:
            self._drop(record, f"all its windows closed at stream time {self.observed_stream_time}")
            return
        if early:
            self._process_early(record, close_time)
        else:
            self._process_in_order(record, close_time)

    def _closed_starts(self, emitted_close_time: int, close_time: int) -> tuple[int, int] | None:
        """A sliding window is closed once its end (inclusive) < the close time."""
        first = 0 if emitted_close_time < 0 else emitted_close_time - self.difference
        last = close_time - self.difference - 1
        return (first, last) if first <= last else None

    def _process_in_order(self, record: Record, close_time: int) -> None:
        """Updates the record's windows latest first, as Kafka Streams does with its stores' backward
        fetch (so the updates go downstream in that order), then creates the windows it lacks."""
        timestamp, difference = record.timestamp, self.difference
        starts: set[int] = set()
        left_aggregate = right_aggregate = None
        left_exists = right_exists = False
        previous_time: int | None = None
        for start, value in reversed(list(self.store.fetch_range(
                record.key, max(0, timestamp - 2 * difference), timestamp + 1))):
            starts.add(start)
            end = start + difference
            if start == timestamp + 1:  # this record's right window exists already
                right_exists = True
            elif end > timestamp:
                if right_aggregate is None:
                    right_aggregate = value
                self._update(start, value, record, close_time)
            elif end == timestamp:
                left_exists = True
                self._update(start, value, record, close_time)
                if value.timestamp >= timestamp:
                    return  # a record at this time came before: its windows exist
                previous_time = value.timestamp
            else:
                left_aggregate, previous_time = value, value.timestamp
                break
        if previous_time is not None:
            previous_right = previous_time + 1
            if previous_right not in starts and previous_right + difference >= timestamp:
                self._update(previous_right, None, record, close_time)
        if not left_exists:
            left_not_empty = previous_time is not None and timestamp - difference <= previous_time
            seed = ValueAndTimestamp(left_aggregate.value, timestamp) if left_not_empty and left_aggregate \
                else None
            self._update(timestamp - difference, seed, record, close_time)
        if not right_exists and right_aggregate is not None and right_aggregate.timestamp > timestamp:
            self._create_right_window(record, right_aggregate)

    def _process_early(self, record: Record, close_time: int) -> None:
        """Records before ``time_difference`` would open windows starting before 0: they all go into
        ``[0, d]``, and right windows are made as later records arrive."""
        timestamp = record.timestamp
        starts: set[int] = set()
        combined = right_aggregate = None
        right_exists = False
        previous_time: int | None = None
        for start, value in list(self.store.fetch_range(record.key, 0, timestamp + 1)):
            starts.add(start)
            if start == 0:
                combined = value
                if value.timestamp < timestamp:
                    previous_time = value.timestamp
            elif start <= timestamp:
                right_aggregate = value
                self._update(start, value, record, close_time)
            else:
                right_exists = True
        if right_aggregate is None and combined is not None and combined.timestamp > timestamp:
            right_aggregate = combined
        if not right_exists and right_aggregate is not None and right_aggregate.timestamp > timestamp:
            self._create_right_window(record, right_aggregate)
        if previous_time is not None and previous_time + 1 not in starts:
            self._update(previous_time + 1, None, record, close_time)
        self._update(0, combined, record, close_time)

    def _create_right_window(self, record: Record, aggregate: ValueAndTimestamp[Any]) -> None:
        """The record's right window holds exactly the later records already aggregated elsewhere."""
        start = record.timestamp + 1
        self.store.put(record.key, aggregate, start)
        if not self.cached:
            self.context.forward(Record(Windowed(record.key, Window(start, start + self.difference)),
                                        Change(aggregate.value, None), aggregate.timestamp,
                                        record.raw_headers))

    def _update(self, start: int, current: ValueAndTimestamp[Any] | None, record: Record,
                close_time: int) -> None:
        end = start + self.difference
        if end < close_time:
            self._drop(record, f"window [{start}, {end}] closed at stream time {self.observed_stream_time}")
            return
        old = None if current is None else current.value
        new = self.aggregator(record.key, record.value, self.initializer() if current is None else old)
        new_timestamp = record.timestamp if current is None else max(record.timestamp, current.timestamp)
        self.store.put(record.key, ValueAndTimestamp(new, new_timestamp), start)
        if not self.cached:
            self.context.forward(Record(Windowed(record.key, Window(start, end)),
                                        Change(new, old if self.send_old_values else None), new_timestamp,
                                        record.raw_headers))
