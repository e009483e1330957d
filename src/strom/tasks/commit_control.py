"""Sliding offset commit: the committed offset never passes a record that has not completed.

Offsets in flight are plain ints in a deque and completions land in a set: tracking a record costs no
Python object of its own (thousands of long-lived objects per partition would each add garbage-collector
work). An :class:`OffsetState` exists only for offsets somebody holds a handle to, such as a deferred
completion that may time out.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from strom.errors import OffsetRegressionError
from strom.tasks.completion import Completion

__all__ = ["OffsetState", "OutOfOrderCommitControl"]


class OffsetState:
    """A handle on one reported offset: completes it, and carries its deferred completions, which expire
    ``timeout_at`` (monotonic seconds, -1 never) once the offset holds back the commit."""

    __slots__ = ("_control", "deferred", "offset", "timeout_at")

    def __init__(self, control: OutOfOrderCommitControl, offset: int) -> None:
        self._control = control
        self.offset = offset
        self.timeout_at = -1.0
        self.deferred: list[Completion] = []

    @property
    def done(self) -> bool:
        return self._control.is_complete(self.offset)

    def complete(self) -> None:
        self._control.complete(self.offset)


class OutOfOrderCommitControl:
    """Per-partition queue of offsets with completion flags (Decaton's OutOfOrderCommitControl).

    Offsets are reported and the high watermark updated on the subscription thread; ``complete`` may be
    called from any thread, once per offset (a set insertion, atomic under the GIL).
    """

    def __init__(self) -> None:
        self._pending: deque[int] = deque()
        self._completed: set[int] = set()
        self._states: dict[int, OffsetState] = {}
        self._latest = -1
        self.high_watermark = -1
        self.expired = 0
        # complete(offset), called once per task: the set's own add, so no Python frame per call
        self.complete: Callable[[int], None] = self._completed.add

    def _check_after_latest(self, offset: int) -> None:
        if offset <= self._latest:
            raise OffsetRegressionError(
                f"Offset {offset} reported after {self._latest}: a partition's offsets must be reported in "
                "increasing order; after a seek, start a new OutOfOrderCommitControl for the partition.")

    def report_fetched_offset(self, offset: int) -> OffsetState:
        """Reports one fetched offset and returns a handle on it."""
        self._check_after_latest(offset)
        self._pending.append(offset)
        self._latest = offset
        state = self._states[offset] = OffsetState(self, offset)
        return state

    def report_fetched_offsets(self, offsets: Sequence[int]) -> None:
        """Reports a batch of fetched offsets, ascending as a consumer returns one partition's records."""
        if offsets:
            self._check_after_latest(offsets[0])
            self._pending.extend(offsets)
            self._latest = offsets[-1]

    def is_complete(self, offset: int) -> bool:
        return offset <= self.high_watermark or offset in self._completed

    def track_deferred(self, offset: int, completion: Completion, timeout_ms: int) -> None:
        """Lets ``completion`` of ``offset`` expire ``timeout_ms`` from now (-1: never) once the offset
        holds back the commit (see ``update_high_watermark``)."""
        state = self._states.setdefault(offset, OffsetState(self, offset))
        state.deferred.append(completion)
        if timeout_ms >= 0 and state.timeout_at < 0:
            state.timeout_at = time.monotonic() + timeout_ms / 1000

    def update_high_watermark(self, deferred_timeout_ms: int = -1) -> int:
        """Drops the completed head of the queue (returning how many), expiring the head's deferred
        completions past their timeout (an EXTEND choice waits ``deferred_timeout_ms`` more)."""
        pending, completed, states = self._pending, self._completed, self._states
        popped = 0
        while pending:
            head = pending[0]
            if head not in completed and not self._expire(states.get(head), deferred_timeout_ms):
                break
            pending.popleft()
            completed.discard(head)
            if states:
                states.pop(head, None)
            self.high_watermark = head
            popped += 1
        return popped

    def _expire(self, head: OffsetState | None, deferred_timeout_ms: int) -> bool:
        """Expires the head's open deferred completions past their timeout; True if it is now complete."""
        if head is None or head.timeout_at < 0:
            return False
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
        return head.offset in self._completed

    def commit_ready_offset(self) -> int:
        """The highest offset at and below which every reported offset completed (-1 if none)."""
        return self.high_watermark

    def pending_count(self) -> int:
        return len(self._pending)
