"""group_by_key().windowed_by(...) through the DSL, end to end on the TopologyTestDriver."""

import pytest

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.options import Consumed, Grouped, Materialized, Produced
from strom.streams.kstream.windowed_serdes import WindowedSerdes
from strom.streams.kstream.windows import (
    SessionWindow,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    Windowed,
)
from strom.streams.state.window import builders
from strom.streams.test_driver import TopologyTestDriver

PROPS = {"application.id": "windowed-dsl", "default.key.serde": "String", "default.value.serde": "String"}


def _drive(build, records, props=PROPS, output_key_serde=None):
    sb = StreamsBuilder()
    stream = sb.stream("input", Consumed.with_(Serdes.String(), Serdes.String()))
    table = build(stream)
    key_serde = output_key_serde or WindowedSerdes.time_windowed_serde_from(Serdes.String(), 10_000)
    table.to_stream().to("output", Produced.with_(key_serde, Serdes.Long()))
    driver = TopologyTestDriver(sb.build(), props)
    topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
    for key, value, timestamp in records:
        topic.pipe_input(key, value, timestamp)
    return driver, driver.create_output_topic("output", key_serde, Serdes.Long()).read_key_values_to_list()


def test_tumbling_count_by_key():
    driver, out = _drive(
        lambda s: s.group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10_000))
        .count(materialized=Materialized.as_("counts").with_retention(60_000)),
        [("a", "x", 1_000), ("b", "x", 2_000), ("a", "x", 9_999), ("a", "x", 10_000)])
    assert out == [(Windowed("a", Window(0, 10_000)), 1), (Windowed("b", Window(0, 10_000)), 1),
                   (Windowed("a", Window(0, 10_000)), 2), (Windowed("a", Window(10_000, 20_000)), 1)]
    store = driver.get_window_store("counts")
    assert [(w.key, w.window.start, v) for w, v in store.all()] == \
        [("a", 0, 2), ("a", 10_000, 1), ("b", 0, 1)]
    assert list(store.fetch_range("a", 0, 20_000)) == [(0, 2), (10_000, 1)]
    assert driver.get_timestamped_window_store("counts").fetch("a", 0).timestamp == 9_999
    driver.close()


def test_windowed_reduce_after_key_change_reads_through_a_repartition_topic():
    driver, out = _drive(
        lambda s: s.select_key(lambda k, v: v).map_values(lambda v: 1)
        .group_by_key(Grouped.with_(Serdes.String(), Serdes.Long()))
        .windowed_by(TimeWindows.of_size_with_no_grace(10_000)).reduce(lambda a, b: a + b),
        [("k1", "red", 0), ("k2", "red", 1), ("k3", "blue", 2)])
    assert out == [(Windowed("red", Window(0, 10_000)), 1), (Windowed("red", Window(0, 10_000)), 2),
                   (Windowed("blue", Window(0, 10_000)), 1)]
    assert any(t.endswith("-repartition") for t in driver.builder.internal_topics)
    driver.close()


def test_session_count_merges_and_emits_tombstones_for_merged_sessions():
    session_serde = WindowedSerdes.session_windowed_serde_from(Serdes.String())
    driver, out = _drive(
        lambda s: s.group_by_key().windowed_by(SessionWindows.of_inactivity_gap_and_grace(5_000, 60_000))
        .count(materialized=Materialized.as_(builders.in_memory_session_store("sessions", 100_000))),
        [("u", "x", 0), ("u", "x", 10_000), ("u", "x", 5_000)], output_key_serde=session_serde)
    first, second, merged = SessionWindow(0, 0), SessionWindow(10_000, 10_000), SessionWindow(0, 10_000)
    assert out == [(Windowed("u", first), 1), (Windowed("u", second), 1),
                   (Windowed("u", first), None), (Windowed("u", second), None), (Windowed("u", merged), 3)]
    assert list(driver.get_session_store("sessions").fetch("u")) == [(Windowed("u", merged), 3)]
    driver.close()


def test_a_session_closes_at_its_end_plus_gap_plus_grace_as_in_kafka():
    session_serde = WindowedSerdes.session_windowed_serde_from(Serdes.String())
    driver, out = _drive(
        lambda s: s.group_by_key().windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 2))
        .count(materialized=Materialized.as_("sessions").with_retention(1_000).with_caching_disabled()),
        [("u", "x", 0), ("w", "x", 8),   # stream time 8: past [0, 0]'s end + grace, not + gap
         ("u", "x", 3),                   # so it still joins [0, 0]: [0, 3]
         ("w", "x", 20),                  # stream time 20: [0, 3] closed at 3 + 5 + 2 = 10
         ("u", "x", 7)],                  # would join [0, 3]: dropped as late
        output_key_serde=session_serde)
    assert [(w.key, w.window.start, w.window.end, count) for w, count in out] == [
        ("u", 0, 0, 1), ("w", 8, 8, 1), ("u", 0, 0, None), ("u", 0, 3, 2), ("w", 20, 20, 1)]
    assert driver.metrics["dropped_records"] == 1
    driver.close()


def test_a_session_ending_exactly_at_the_close_time_can_still_merge_with_the_default_retention():
    session_serde = WindowedSerdes.session_windowed_serde_from(Serdes.String())
    driver, out = _drive(  # the store keeps sessions for gap + grace: [0, 0] must outlive stream time 7
        lambda s: s.group_by_key().windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 2))
        .count(materialized=Materialized.as_("sessions").with_caching_disabled()),
        [("u", "x", 0), ("u", "x", 7),  # close time 7 - 2 - 5 = 0: [0, 0] is not closed (0 < 0 is false)
         ("u", "x", 5)],                # within the gap of both: one session [0, 7]
        output_key_serde=session_serde)
    assert [(w.window.start, w.window.end, count) for w, count in out][-1] == (0, 7, 3)
    driver.close()


def test_late_records_count_in_dropped_records_metric():
    driver, out = _drive(
        lambda s: s.group_by_key().windowed_by(TimeWindows.of_size_and_grace(10_000, 1_000)).count(),
        [("a", "x", 0), ("a", "x", 11_000), ("a", "x", 5_000)])
    assert len(out) == 2
    assert driver.metrics["dropped_records"] == 1
    driver.close()


def test_retention_shorter_than_window_and_grace_is_rejected():
    with pytest.raises(TopologyError, match="retention"):
        _drive(lambda s: s.group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10_000))
               .count(materialized=Materialized.as_("c").with_retention(5_000)), [])


def test_sliding_windows_exist_where_records_are():
    driver, out = _drive(
        lambda s: s.group_by_key().windowed_by(SlidingWindows.of_time_difference_and_grace(10, 100))
        .count(materialized=Materialized.as_("sliding").with_caching_disabled()),
        [("k", "x", 10), ("k", "x", 15), ("k", "x", 12)],
        output_key_serde=WindowedSerdes.time_windowed_serde_from(Serdes.String(), 10))
    window = lambda start: Windowed("k", Window(start, start + 10))  # noqa: E731
    assert out == [(window(0), 1),                       # 10: its left window
                   (window(11), 1), (window(5), 2),      # 15: right window of 10, its own left window
                   (window(11), 2), (window(5), 3),      # 12 (late, in grace) updates both, latest first ...
                   (window(2), 2), (window(13), 1)]      # ... gets its left window and its right one
    store = driver.get_window_store("sliding")
    assert {w.window.start: count for w, count in store.all()} == {0: 1, 2: 2, 5: 3, 11: 2, 13: 1}
    driver.close()


def test_sliding_windows_put_early_records_in_the_first_window():
    driver, out = _drive(
        lambda s: s.group_by_key().windowed_by(SlidingWindows.of_time_difference_with_no_grace(10))
        .count(materialized=Materialized.with_(None, None).with_caching_disabled()),
        [("k", "x", 3), ("k", "x", 5)],
        output_key_serde=WindowedSerdes.time_windowed_serde_from(Serdes.String(), 10))
    assert out == [(Windowed("k", Window(0, 10)), 1), (Windowed("k", Window(4, 14)), 1),
                   (Windowed("k", Window(0, 10)), 2)]
    driver.close()


def test_cached_session_store_emits_only_surviving_sessions_per_commit():
    sb = StreamsBuilder()
    session_serde = WindowedSerdes.session_windowed_serde_from(Serdes.String())
    (sb.stream("input", Consumed.with_(Serdes.String(), Serdes.String())).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 1_000))
     .count(materialized=Materialized.as_("cached-sessions"))
     .to_stream().to("output", Produced.with_(session_serde, Serdes.Long())))
    with TopologyTestDriver(sb.build(), PROPS, commit_per_record=False) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        output = driver.create_output_topic("output", session_serde, Serdes.Long())
        for timestamp in (0, 3, 100):
            topic.pipe_input("u", "x", timestamp)
        assert output.read_key_values_to_list() == []
        driver.commit()
        # [0, 0] was merged into [0, 3] before anything was flushed: it is never emitted nor retracted
        assert output.read_key_values_to_list() == [(Windowed("u", SessionWindow(0, 3)), 2),
                                                    (Windowed("u", SessionWindow(100, 100)), 1)]
        topic.pipe_input("u", "x", 104)
        driver.commit()
        assert output.read_key_values_to_list() == [(Windowed("u", SessionWindow(100, 100)), None),
                                                    (Windowed("u", SessionWindow(100, 104)), 2)]
        assert [count for _, count in driver.get_session_store("cached-sessions").fetch("u")] == [2, 2]
