"""Window specifications and windowed keys, with Kafka Streams' semantics and Python spelling.

Durations are ``datetime.timedelta`` or whole milliseconds (``int``); every window boundary is in
milliseconds since the epoch, as in record timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from strom.errors import WindowSpecError
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP

__all__ = [
    "Duration",
    "JoinWindows",
    "SessionWindow",
    "SessionWindows",
    "SlidingWindows",
    "TimeWindows",
    "UnlimitedWindows",
    "Window",
    "Windowed",
]

K = TypeVar("K")

Duration = timedelta | int



def _millis(duration: Duration, what: str) -> int:
    """Milliseconds of ``duration``, any sign; a WindowSpecError naming ``what`` when it is not a duration."""
    if isinstance(duration, bool) or not isinstance(duration, timedelta | int):
        raise WindowSpecError(
            f"{what} must be a datetime.timedelta or whole milliseconds (int), got {duration!r}."
        )
    return duration if isinstance(duration, int) else duration // timedelta(milliseconds=1)


def to_millis(duration: Duration, what: str) -> int:
    """Milliseconds of a duration that must not be negative (grace periods, retention, time limits)."""
    millis = _millis(duration, what)
    if millis < 0:
        raise WindowSpecError(f"{what} must not be negative, got {millis} ms. Pass a duration >= 0.")
    return millis


def _positive_millis(duration: Duration, what: str) -> int:
    """Milliseconds of a window's defining duration (size, advance, gap), which must be above zero."""
    millis = to_millis(duration, what)
    if millis == 0:
        raise WindowSpecError(f"{what} must be greater than zero. Pass a positive duration.")
    return millis


def _grace_millis(grace: Duration) -> int:
    return to_millis(grace, "Grace period")


class _GracePeriod:
    """What every window spec shares: the grace period after a window's end in which late records count."""

    __slots__ = ()
    grace_ms: int

    def grace_period_ms(self) -> int:
        return self.grace_ms


@dataclass(frozen=True, slots=True)
class Window:
    """A time interval [start, end) of a time window, or [start, end] of a session window."""

    start: int
    end: int

    def overlaps(self, other: Window) -> bool:
        """True when the two half-open intervals share a millisecond (time windows)."""
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True, slots=True)
class SessionWindow(Window):
    """A session's interval: both ends inclusive, start == end for a single record."""

    def overlaps(self, other: Window) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """The key of a windowed result: the record key and the window it was aggregated in."""

    key: K
    window: Window

    def __str__(self) -> str:
        return f"[{self.key}@{self.window.start}/{self.window.end}]"


_new_object = object.__new__
_set_field = object.__setattr__


def new_windowed(key: K, window: Window) -> Windowed[K]:
    """``Windowed(key, window)`` set field by field: a frozen dataclass's ``__init__`` costs twice as
    much, and a cached windowed aggregation makes one per flushed window."""
    windowed = _new_object(Windowed)
    _set_field(windowed, "key", key)
    _set_field(windowed, "window", window)
    return windowed


@dataclass(frozen=True, slots=True)
class TimeWindows(_GracePeriod):
    """Fixed-size windows: tumbling when ``advance == size``, hopping (overlapping) when smaller."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    @classmethod
    def of_size_with_no_grace(cls, size: Duration) -> TimeWindows:
        """Tumbling windows of ``size`` that close as soon as stream time passes their end."""
        return cls.of_size_and_grace(size, 0)

    @classmethod
    def of_size_and_grace(cls, size: Duration, grace: Duration) -> TimeWindows:
        """Tumbling windows of ``size`` that still accept records up to ``grace`` after their end."""
        size_ms = _positive_millis(size, "Window size")
        return cls(size_ms, size_ms, _grace_millis(grace))

    def advance_by(self, advance: Duration) -> TimeWindows:
        """Hopping windows: a new window starts every ``advance`` (0 < advance <= size)."""
        advance_ms = _positive_millis(advance, "Window advance")
        if advance_ms > self.size_ms:
            raise WindowSpecError(
                f"Window advance ({advance_ms} ms) must not exceed the window size "
                f"({self.size_ms} ms). Use an advance <= size."
            )
        return TimeWindows(self.size_ms, advance_ms, self.grace_ms)

    def windows_for(self, timestamp: int) -> dict[int, Window]:
        """Every window (by start) that contains ``timestamp``, oldest first."""
        start = (max(0, timestamp - self.size_ms + self.advance_ms) // self.advance_ms) * self.advance_ms
        windows: dict[int, Window] = {}
        while start <= timestamp:
            windows[start] = Window(start, min(start + self.size_ms, MAX_TIMESTAMP))
            start += self.advance_ms
        return windows

    def size(self) -> int:
        return self.size_ms

    def retention_ms(self) -> int:
        """How long a store must keep a window: until it closes."""
        return self.size_ms + self.grace_ms


@dataclass(frozen=True, slots=True)
class SlidingWindows(_GracePeriod):
    """Windows of ``time_difference`` that slide with the records: two records share a window when
    their timestamps differ by at most the time difference (both ends inclusive)."""

    time_difference_ms: int
    grace_ms: int

    @classmethod
    def of_time_difference_with_no_grace(cls, time_difference: Duration) -> SlidingWindows:
        return cls.of_time_difference_and_grace(time_difference, 0)

    @classmethod
    def of_time_difference_and_grace(cls, time_difference: Duration, grace: Duration) -> SlidingWindows:
        return cls(
            _positive_millis(time_difference, "Sliding window time difference"),
            _grace_millis(grace),
        )

    def retention_ms(self) -> int:
        """A record's right window ends one time difference after it: twice the difference + grace."""
        return 2 * self.time_difference_ms + self.grace_ms


@dataclass(frozen=True, slots=True)
class SessionWindows(_GracePeriod):
    """Sessions of activity per key, separated by gaps longer than ``inactivity_gap``."""

    gap_ms: int
    grace_ms: int

    @classmethod
    def of_inactivity_gap_with_no_grace(cls, inactivity_gap: Duration) -> SessionWindows:
        return cls.of_inactivity_gap_and_grace(inactivity_gap, 0)

    @classmethod
    def of_inactivity_gap_and_grace(cls, inactivity_gap: Duration, grace: Duration) -> SessionWindows:
        return cls(
            _positive_millis(inactivity_gap, "Session inactivity gap"), _grace_millis(grace)
        )

    def inactivity_gap(self) -> int:
        return self.gap_ms

    def retention_ms(self) -> int:
        return self.gap_ms + self.grace_ms


@dataclass(frozen=True, slots=True)
class JoinWindows(_GracePeriod):
    """How far apart two records of a stream-stream join may be: the other side's timestamp must lie
    in [this timestamp - before, this timestamp + after]."""

    before_ms: int
    after_ms: int
    grace_ms: int

    @classmethod
    def of_time_difference_with_no_grace(cls, time_difference: Duration) -> JoinWindows:
        return cls.of_time_difference_and_grace(time_difference, 0)

    @classmethod
    def of_time_difference_and_grace(cls, time_difference: Duration, grace: Duration) -> JoinWindows:
        difference_ms = to_millis(time_difference, "Join time difference")
        return cls(difference_ms, difference_ms, _grace_millis(grace))

    def before(self, time_difference: Duration) -> JoinWindows:
        """Same window, but the other side may be at most ``time_difference`` earlier."""
        return self._with_bounds(_millis(time_difference, "Join window 'before'"), self.after_ms)

    def after(self, time_difference: Duration) -> JoinWindows:
        """Same window, but the other side may be at most ``time_difference`` later."""
        return self._with_bounds(self.before_ms, _millis(time_difference, "Join window 'after'"))

    def _with_bounds(self, before_ms: int, after_ms: int) -> JoinWindows:
        if before_ms + after_ms < 0:
            raise WindowSpecError(
                f"Join window is empty: before={before_ms} ms, after={after_ms} ms; "
                "'before' + 'after' must be >= 0."
            )
        return JoinWindows(before_ms, after_ms, self.grace_ms)

    def size(self) -> int:
        return self.before_ms + self.after_ms

    def retention_ms(self) -> int:
        return self.size() + self.grace_ms



@dataclass(frozen=True, slots=True)
class UnlimitedWindows(TimeWindows):
    """Kafka's UnlimitedWindows: one window per key from ``start_ms`` on that never ends (its end is the
    largest timestamp) and so never closes; records before the start fall in no window."""

    start_ms: int = 0

    @classmethod
    def of(cls) -> UnlimitedWindows:
        """The window starting at 0."""
        return cls.start_on(0)

    @classmethod
    def start_on(cls, start: int | datetime) -> UnlimitedWindows:
        """The window starting at ``start`` (epoch milliseconds or a datetime)."""
        start_ms = int(start.timestamp() * 1000) if isinstance(start, datetime) else int(start)
        if start_ms < 0:
            raise WindowSpecError(f"UnlimitedWindows start must not be negative, got {start_ms} ms.")
        # size up to the largest timestamp, so every window computation ends it there
        return cls(MAX_TIMESTAMP - start_ms, MAX_TIMESTAMP, 0, start_ms)

    def advance_by(self, advance: Duration) -> TimeWindows:
        raise WindowSpecError("UnlimitedWindows have one window per key; they cannot hop.")

    def windows_for(self, timestamp: int) -> dict[int, Window]:
        if timestamp < self.start_ms:
            return {}
        return {self.start_ms: Window(self.start_ms, MAX_TIMESTAMP)}
