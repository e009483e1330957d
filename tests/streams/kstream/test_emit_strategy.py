"""EmitStrategy.on_window_close (Kafka's KIP-825): a time or sliding windowed aggregation sends one final
result per window once stream time passes its end + grace; the last close time it emitted for travels in the
commit metadata, so a task opened again does not emit those windows twice."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    EmitStrategy,
    Materialized,
    Produced,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    StreamsConfig,
    TimeWindows,
    TopologyTestDriver,
    WindowedSerdes,
)
from strom.streams.processor import TaskId, TopicPartition
from strom.streams.processor.internals.task import StreamTask
from strom.streams.processor.records import ConsumerRecord
from strom.streams.state.cache import ThreadCache

S, L = Serdes.String(), Serdes.Long()
WINDOWED = WindowedSerdes.time_windowed_serde_from(S, 10)


ON_CLOSE = EmitStrategy.on_window_close()


class Sink:
    """Keeps what the task sends; delivers at once, with offsets per partition (changelogs need them)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None]] = []
        self.offsets: dict[tuple[str, int], int] = {}

    def send(self, collector, topic, partition, key, value, timestamp, headers) -> None:
        self.sent.append((topic, key))
        offset = self.offsets[(topic, partition or 0)] = self.offsets.get((topic, partition or 0), -1) + 1
        collector.delivered(topic, partition or 0, offset)

    def flush(self, collector) -> None:
        pass


def counts(windows: TimeWindows, caching: bool = True, emit: EmitStrategy = ON_CLOSE):
    materialized = Materialized.as_("counts").with_value_serde(L).with_retention(1000)
    builder = StreamsBuilder()
    (builder.stream("in").group_by_key().windowed_by(windows).emit_strategy(emit)
     .count(materialized=materialized if caching else materialized.with_caching_disabled())
     .to_stream().to("out", Produced.with_(WINDOWED, L)))
    return builder.build()


def run(topology, props, events):
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        for key, timestamp in events:
            source.pipe_input(key, "v", timestamp=timestamp)
        out = driver.create_output_topic("out", WINDOWED, L).read_records_to_list()
        return [(r.key.key, r.key.window.start, r.value, r.timestamp) for r in out], driver.metrics


@pytest.mark.parametrize("caching", [True, False])
def test_each_tumbling_window_is_emitted_once_when_it_closes(props, caching):
    events = [("a", 1), ("b", 2), ("a", 8), ("a", 12),  # [0, 10) open until stream time 10 + grace 2
              ("b", 11), ("a", 13),                      # stream time 13: [0, 10) closed (10 + 2 <= 13)
              ("a", 5),                                  # late for its closed window: dropped
              ("b", 25)]                                 # [10, 20) closes (20 + 2 <= 25)
    out, metrics = run(counts(TimeWindows.of_size_and_grace(10, 2), caching), props, events)
    assert out == [("a", 0, 2, 8), ("b", 0, 1, 2),       # timestamp: the window's latest record
                   ("a", 10, 2, 13), ("b", 10, 1, 11)]
    assert metrics["dropped_records"] == 1


def test_hopping_windows_each_emit_their_final_count_once(props):
    windows = TimeWindows.of_size_with_no_grace(10).advance_by(5)
    out, _ = run(counts(windows), props, [("a", 1), ("a", 7), ("a", 12), ("a", 30)])
    assert out == [("a", 0, 2, 7), ("a", 5, 2, 12), ("a", 10, 1, 12)]


def test_windows_closing_together_go_out_by_start_then_key(props):
    """Kafka Streams' order: its store for emit on close is time-ordered (window start, then key bytes)."""
    windows = TimeWindows.of_size_with_no_grace(10).advance_by(5)
    out, _ = run(counts(windows), props, [("b", 1), ("a", 7), ("a", 30)])
    assert out == [("a", 0, 1, 7), ("b", 0, 1, 1), ("a", 5, 1, 7)]


def test_on_window_update_is_the_default_behaviour(props):
    out, _ = run(counts(TimeWindows.of_size_with_no_grace(10), caching=False,
                        emit=EmitStrategy.on_window_update()), props, [("a", 1), ("a", 2), ("a", 15)])
    assert out == [("a", 0, 1, 1), ("a", 0, 2, 2), ("a", 10, 1, 15)]


def test_a_reopened_task_does_not_emit_what_it_emitted_before(tmp_path):
    partition = TopicPartition("in", 1)
    config = StreamsConfig({"application.id": "app", "state.dir": str(tmp_path),
                            "default.key.serde": "String", "default.value.serde": "String"})

    def run_task(events, committed):
        """Opens the task as the runtime does (committed metadata first, then the processors start),
        processes ``events`` (offset, timestamp), commits; returns the windows emitted and the metadata."""
        sink = Sink()
        task = StreamTask(TaskId(0, 1), counts(TimeWindows.of_size_with_no_grace(10)).internal, config,
                          sink, ThreadCache(1 << 20), partitions=[partition])
        task.initialize_task_time(committed)
        task.initialize()
        task.complete_restoration()
        task.add_records(partition, [ConsumerRecord("in", 1, offset, timestamp, b"a", b"v")
                                     for offset, timestamp in events])
        task.process_all()
        task.commit()
        metadata = {tp: meta for tp, (_, meta) in task.committable_offsets_and_metadata().items()}
        task.close()
        emitted = [WINDOWED.deserializer().deserialize("out", key) for topic, key in sink.sent
                   if topic == "out"]
        return [(w.key, w.window.start) for w in emitted], metadata

    emitted, committed = run_task([(0, 1), (1, 12)], {})
    assert emitted == [("a", 0)]
    emitted, _ = run_task([(2, 15), (3, 25)], committed)
    assert emitted == [("a", 10)]  # not [0, 10) again: the first task emitted it
    emitted, _ = run_task([(2, 15), (3, 25)], {})  # without the metadata it would be
    assert emitted == [("a", 0), ("a", 10)]


@settings(max_examples=40, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 80)), min_size=1, max_size=30),
       caching=st.booleans())
def test_sliding_windows_emit_each_closed_window_once_with_its_final_count(events, caching):
    """The final results are the last update of each window that closed; nothing else, nothing twice."""
    props = {"application.id": "app", "default.key.serde": "String", "default.value.serde": "String"}
    windows = SlidingWindows.of_time_difference_and_grace(10, 3)
    updates, _ = run(counts(windows, caching=False, emit=EmitStrategy.on_window_update()), props, events)
    finals, _ = run(counts(windows, caching=caching), props, events)
    close_time = max(t for _, t in events) - 3
    last_update = {(key, start): (count, timestamp) for key, start, count, timestamp in updates}
    expected = {window: final for window, final in last_update.items() if window[1] + 10 < close_time}
    assert len(finals) == len({(key, start) for key, start, _, _ in finals})
    assert {(key, start): (count, timestamp) for key, start, count, timestamp in finals} == expected


SESSIONED = WindowedSerdes.session_windowed_serde_from(S)


def session_counts(emit: EmitStrategy, caching: bool):
    materialized = Materialized.as_("sessions").with_value_serde(L)
    materialized = materialized if caching else materialized.with_caching_disabled()
    builder = StreamsBuilder()
    (builder.stream("in").group_by_key().windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 2))
     .emit_strategy(emit).count(materialized=materialized)
     .to_stream().to("out", Produced.with_(SESSIONED, L)))
    return builder.build()


def run_sessions(topology, events):
    props = {"application.id": "app", "default.key.serde": "String", "default.value.serde": "String"}
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        for key, timestamp in events:
            source.pipe_input(key, "v", timestamp=timestamp)
        out = driver.create_output_topic("out", SESSIONED, L).read_records_to_list()
        return [((r.key.key, r.key.window.start, r.key.window.end), r.value, r.timestamp) for r in out]


def test_each_closed_session_is_emitted_once_at_its_end():
    events = [("a", 1), ("a", 4), ("b", 3),  # a: [1, 4], b: [3, 3]
              ("a", 20),                      # close time 20 - 2 - 5 = 13: both closed
              ("a", 22), ("b", 40)]           # close time 33: a's [20, 22] closed
    out = run_sessions(session_counts(ON_CLOSE, caching=False), events)
    assert out == [(("b", 3, 3), 1, 3), (("a", 1, 4), 2, 4), (("a", 20, 22), 2, 22)]  # by session end


def test_sessions_closing_together_go_out_by_end_start_then_key():
    events = [("b", 3), ("c", 1), ("c", 3), ("a", 3), ("a", 40)]  # close time 33: c [1, 3], a and b [3, 3]
    out = run_sessions(session_counts(ON_CLOSE, caching=False), events)
    assert out == [(("c", 1, 3), 2, 3), (("a", 3, 3), 1, 3), (("b", 3, 3), 1, 3)]


@settings(max_examples=40, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 60)), min_size=1, max_size=25),
       caching=st.booleans())
def test_sessions_emit_on_close_the_final_count_of_every_closed_session(events, caching):
    """What updates leave in the end, closed, is emitted once; a session emitted and later merged by a
    late record within the gap (as in Kafka) is covered by the merged one, emitted once it closes."""
    updates = run_sessions(session_counts(EmitStrategy.on_window_update(), caching=False), events)
    finals = run_sessions(session_counts(ON_CLOSE, caching), events)
    close_time = max(t for _, t in events) - 2 - 5
    last: dict[tuple, int | None] = {}
    for session, count, _ in updates:
        last[session] = count
    expected = {s: c for s, c in last.items() if c is not None and s[2] < close_time}
    emitted = [session for session, _, _ in finals]
    assert len(emitted) == len(set(emitted))
    assert all(dict((s, c) for s, c, _ in finals).get(s) == c for s, c in expected.items())
    for key, start, end in set(emitted) - set(expected):
        assert any(k == key and s <= start and end <= e for k, s, e in expected), (key, start, end)
    assert all(timestamp == session[2] for session, _, timestamp in finals)


def test_on_window_close_needs_an_emit_strategy():
    grouped = StreamsBuilder().stream("in").group_by_key()
    with pytest.raises(TopologyError, match="needs an EmitStrategy"):
        grouped.windowed_by(TimeWindows.of_size_with_no_grace(10)).emit_strategy("on_window_close")
