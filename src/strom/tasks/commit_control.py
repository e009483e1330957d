"""Sliding offset commit: the committed offset never passes a record that has not completed."""

from __future__ import annotations

import time
from collections import deque

from strom.tasks.completion import Completion


class OffsetState:
    """One fetched offset: done once every stage of its task completed; may carry deferred completions."""

    __slots__ = ("deferred", "done", "offset", "timeout_at")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.done = False
        self.timeout_at = -1.0
        self.deferred: list[Completion] = []

    def complete(self) -> None:
        self.done = True


class OffsetRegressionError(RuntimeError):
    """An offset was reported below one reported before: a bug or a seek the control was not told of."""


class OutOfOrderCommitControl:
    """Per-partition queue of offsets with completion flags (Decaton's OutOfOrderCommitControl).

    ``report_fetched_offset`` and ``update_high_watermark`` run on the subscription thread; completions
    flip ``OffsetState.done`` from any thread (a single attribute store, atomic under the GIL).
    """

    def __init__(self) -> None:
        self._states: deque[OffsetState] = deque()
        self._latest = -1
        self.high_watermark = -1
        self.expired = 0

    def report_fetched_offset(self, offset: int) -> OffsetState:
        if offset <= self._latest:
            raise OffsetRegressionError(f"offset {offset} reported after {self._latest}")
        state = OffsetState(offset)
        self._states.append(state)
        self._latest = offset
        return state

    def update_high_watermark(self, deferred_timeout_ms: int = -1) -> int:
        """Drops the completed head of the queue (returning how many), expiring the head's deferred
        completions past their timeout."""
        states = self._states
        popped = 0
        while states:
            head = states[0]
            if not head.done and (head.timeout_at < 0 or not self._expire(head, deferred_timeout_ms)
                                  or not head.done):
                break
            self.high_watermark = head.offset
            states.popleft()
            popped += 1
        return popped

    def _expire(self, head: OffsetState, deferred_timeout_ms: int) -> bool:
        now = time.monotonic()
        if head.timeout_at > now:
            return False
        for completion in list(head.deferred):
            if completion.is_complete():
                continue
            if completion.expire():
                self.expired += 1
            else:
                head.timeout_at = now + max(deferred_timeout_ms, 0) / 1000
        return True

    def commit_ready_offset(self) -> int:
        """The highest offset at and below which every reported offset completed (-1 if none)."""
        return self.high_watermark

    def pending_count(self) -> int:
        return len(self._states)
