"""Punctuation schedules: a heap per time type, fired in time order, missed periods skipped (Kafka's rule)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from strom.streams.processor.api import Punctuator

NEVER = 1 << 62


class PunctuationSchedule:
    """One ``context.schedule`` call: the node it belongs to, its interval and next due time."""

    __slots__ = ("cancelled", "interval", "node", "punctuator", "timestamp")

    def __init__(self, node: object, timestamp: int, interval: int, punctuator: Punctuator) -> None:
        self.node = node
        self.timestamp = timestamp
        self.interval = interval
        self.punctuator = punctuator
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def next_time(self, now: int) -> int:
        """The next due time after firing at ``now``, skipping periods that were missed entirely."""
        nxt = self.timestamp + self.interval
        if now >= nxt:
            nxt = now - ((now - self.timestamp) % self.interval) + self.interval
        return nxt


class PunctuationQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, PunctuationSchedule]] = []
        self._seq = itertools.count()
        self.next_time = NEVER
        """When the earliest schedule is due: the task compares it with stream time after every record."""

    def schedule(self, schedule: PunctuationSchedule) -> PunctuationSchedule:
        heapq.heappush(self._heap, (schedule.timestamp, next(self._seq), schedule))
        self.next_time = self._heap[0][0]
        return schedule

    def may_punctuate(self, now: int, run: Callable[[PunctuationSchedule, int], None]) -> bool:
        """Fires every schedule due at ``now`` (each at most once per call); True if any fired."""
        fired = False
        due: list[PunctuationSchedule] = []
        while self._heap and self._heap[0][0] <= now:
            _, _, schedule = heapq.heappop(self._heap)
            if not schedule.cancelled:
                due.append(schedule)
        for schedule in due:
            run(schedule, now)
            fired = True
            if not schedule.cancelled:
                schedule.timestamp = schedule.next_time(now)
                heapq.heappush(self._heap, (schedule.timestamp, next(self._seq), schedule))
        self.next_time = self._heap[0][0] if self._heap else NEVER
        return fired
