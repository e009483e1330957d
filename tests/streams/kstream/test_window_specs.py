"""Window specifications, windowed keys and Kafka-compatible windowed serdes."""

from datetime import timedelta

import pytest

from strom.errors import StromError
from strom.kafka.serdes import Serdes
from strom.streams.kstream.windowed_serdes import WindowedSerdes
from strom.streams.kstream.windows import (
    JoinWindows,
    SessionWindow,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    Windowed,
    WindowSpecError,
)


def test_tumbling_window_boundaries_are_half_open():
    windows = TimeWindows.of_size_with_no_grace(timedelta(minutes=1))
    assert windows.windows_for(0) == {0: Window(0, 60_000)}
    assert windows.windows_for(59_999) == {0: Window(0, 60_000)}
    assert windows.windows_for(60_000) == {60_000: Window(60_000, 120_000)}


def test_hopping_windows_overlap():
    windows = TimeWindows.of_size_and_grace(10, 0).advance_by(5)
    assert list(windows.windows_for(12).values()) == [Window(5, 15), Window(10, 20)]
    assert list(windows.windows_for(3).values()) == [Window(0, 10)]
    hopping = TimeWindows.of_size_with_no_grace(timedelta(seconds=5)).advance_by(timedelta(seconds=1))
    assert sorted(hopping.windows_for(7_500)) == [3_000, 4_000, 5_000, 6_000, 7_000]


def test_grace_and_retention():
    windows = TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(seconds=2))
    assert (windows.size(), windows.grace_period_ms(), windows.retention_ms()) == (10_000, 2_000, 12_000)
    sessions = SessionWindows.of_inactivity_gap_and_grace(5, 3)
    assert (sessions.inactivity_gap(), sessions.grace_period_ms()) == (5, 3)
    assert SlidingWindows.of_time_difference_and_grace(10, 1).time_difference_ms == 10


@pytest.mark.parametrize(("build", "message"), [
    (lambda: TimeWindows.of_size_with_no_grace(0),
     r"^Window size must be greater than zero\. Pass a positive duration\.$"),
    (lambda: TimeWindows.of_size_and_grace(10, -1),
     r"^Grace period must not be negative, got -1 ms\. Pass a duration >= 0\.$"),
    (lambda: TimeWindows.of_size_with_no_grace(10).advance_by(11),
     r"^Window advance \(11 ms\) must not exceed the window size \(10 ms\)\. Use an advance <= size\.$"),
    (lambda: TimeWindows.of_size_with_no_grace(10).advance_by(0),
     r"^Window advance must be greater than zero\. Pass a positive duration\.$"),
    (lambda: SessionWindows.of_inactivity_gap_with_no_grace(timedelta(0)),
     r"^Session inactivity gap must be greater than zero\. Pass a positive duration\.$"),
    (lambda: SlidingWindows.of_time_difference_with_no_grace(-5),
     r"^Sliding window time difference must not be negative, got -5 ms\. Pass a duration >= 0\.$"),
    (lambda: JoinWindows.of_time_difference_with_no_grace(10).before(-11),
     r"^Join window is empty: before=-11 ms, after=10 ms; 'before' \+ 'after' must be >= 0\.$"),
    (lambda: TimeWindows.of_size_with_no_grace("10s"),
     r"^Window size must be a datetime\.timedelta or whole milliseconds \(int\), got '10s'\.$"),
])
def test_invalid_specs_raise_a_window_spec_error_that_says_what_to_do(build, message):
    with pytest.raises(WindowSpecError, match=message):
        build()
    assert issubclass(WindowSpecError, StromError)


def test_join_windows_before_and_after():
    windows = JoinWindows.of_time_difference_and_grace(timedelta(seconds=5), 100)
    assert (windows.before_ms, windows.after_ms, windows.grace_ms) == (5_000, 5_000, 100)
    asymmetric = windows.before(1_000).after(2_000)
    assert (asymmetric.before_ms, asymmetric.after_ms, asymmetric.size()) == (1_000, 2_000, 3_000)
    assert windows.after(-1_000).size() == 4_000


def test_session_windows_include_both_ends():
    assert SessionWindow(0, 10).overlaps(SessionWindow(10, 20))
    assert not Window(0, 10).overlaps(Window(10, 20))


def test_time_windowed_serde_is_kafka_layout():
    serde = WindowedSerdes.time_windowed_serde_from(Serdes.String(), 60_000)
    data = serde.serialize("t", Windowed("a", Window(120_000, 180_000)))
    assert data == b"a" + (120_000).to_bytes(8, "big")
    assert serde.deserialize("t", data) == Windowed("a", Window(120_000, 180_000))


def test_session_windowed_serde_is_kafka_layout():
    serde = WindowedSerdes.session_windowed_serde_from(Serdes.String())
    data = serde.serialize("t", Windowed("k", SessionWindow(5, 9)))
    assert data == b"k" + (9).to_bytes(8, "big") + (5).to_bytes(8, "big")
    assert serde.deserialize("t", data) == Windowed("k", SessionWindow(5, 9))
