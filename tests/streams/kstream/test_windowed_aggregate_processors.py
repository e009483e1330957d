"""Windowed aggregation processors on the engine (Processor API topology, TopologyTestDriver)."""

from strom.kafka.serdes import Serdes
from strom.streams.kstream.internals.windowed_aggregate import (
    KStreamSessionWindowAggregate,
    KStreamWindowAggregate,
)
from strom.streams.kstream.windows import SessionWindow, SessionWindows, TimeWindows, Window, Windowed
from strom.streams.processor.api import Processor
from strom.streams.processor.topology import Topology
from strom.streams.state.window import builders
from strom.streams.test_driver import TopologyTestDriver

PROPS = {"application.id": "windows-test", "default.key.serde": "String", "default.value.serde": "Long"}


class Capture(Processor):
    def __init__(self, sink: list) -> None:
        self.sink = sink

    def process(self, record) -> None:
        self.sink.append((record.key, record.value.new_value, record.value.old_value, record.timestamp))


def _run(processor, store_builder, records, props=PROPS):
    out: list = []
    topology = (Topology()
                .add_source("src", "input", key_serde=Serdes.String(), value_serde=Serdes.Long())
                .add_processor("agg", processor, "src")
                .add_state_store(store_builder, "agg")
                .add_processor("capture", lambda: Capture(out), "agg"))
    with TopologyTestDriver(topology, props) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.Long())
        for key, value, timestamp in records:
            topic.pipe_input(key, value, timestamp)
        dropped = driver.get_state_store(store_builder.name)
        return out, dropped


def _count_store(name="counts", retention=100, size=10):
    return builders.window_store_builder(builders.in_memory_timestamped_window_store(name, retention, size))


def test_tumbling_count_forwards_every_update_without_cache():
    windows = TimeWindows.of_size_with_no_grace(10)
    agg = KStreamWindowAggregate(windows, "counts", lambda: 0, lambda k, v, a: a + 1)
    out, _ = _run(lambda: agg, _count_store(),
                  [("a", 1, 0), ("b", 1, 3), ("a", 1, 9), ("a", 1, 10), ("b", 1, 3)])
    assert out == [(Windowed("a", Window(0, 10)), 1, None, 0), (Windowed("b", Window(0, 10)), 1, None, 3),
                   (Windowed("a", Window(0, 10)), 2, None, 9), (Windowed("a", Window(10, 20)), 1, None, 10)]
    # no grace: stream time 10 closed [0, 10), so the last record is late
    assert agg.dropped_records == 1


def test_late_records_are_dropped_after_grace():
    windows = TimeWindows.of_size_and_grace(10, 5)
    agg = KStreamWindowAggregate(windows, "counts", lambda: 0, lambda k, v, a: a + v)
    out, _ = _run(lambda: agg, _count_store(),
                  [("a", 1, 0), ("a", 1, 14), ("a", 1, 9), ("a", 1, 15), ("a", 1, 9)])
    # at stream time 14 window [0,10) is open until 15; the second record at 9 arrives after it closed
    assert [(w.window.start, new) for w, new, _, _ in out] == [(0, 1), (10, 1), (0, 2), (10, 2)]
    assert agg.dropped_records == 1


def test_hopping_windows_count_each_overlap():
    windows = TimeWindows.of_size_with_no_grace(10).advance_by(5)
    out, _ = _run(lambda: KStreamWindowAggregate(windows, "counts", lambda: 0, lambda k, v, a: a + 1),
                  _count_store(), [("a", 1, 7)])
    assert [w.window for w, *_ in out] == [Window(0, 10), Window(5, 15)]


def test_cached_window_store_emits_once_per_commit():
    windows = TimeWindows.of_size_with_no_grace(10)
    out: list = []
    store = _count_store().with_caching_enabled()
    topology = (Topology()
                .add_source("src", "input", key_serde=Serdes.String(), value_serde=Serdes.Long())
                .add_processor("agg", lambda: KStreamWindowAggregate(windows, "counts", lambda: 0,
                                                                     lambda k, v, a: a + 1), "src")
                .add_state_store(store, "agg")
                .add_processor("capture", lambda: Capture(out), "agg"))
    with TopologyTestDriver(topology, PROPS, commit_per_record=False) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.Long())
        for timestamp in (1, 2, 3):
            topic.pipe_input("a", 1, timestamp)
        assert out == []
        driver.commit()
        assert out == [(Windowed("a", Window(0, 10)), 3, None, 3)]
        assert driver.get_state_store("counts").fetch("a", 0).value == 3


def test_session_windows_merge_and_retract_merged_sessions():
    windows = SessionWindows.of_inactivity_gap_and_grace(5, 20)
    store = builders.session_store_builder(builders.in_memory_session_store("sessions", 100))
    out, _ = _run(lambda: KStreamSessionWindowAggregate(windows, "sessions", lambda: 0,
                                                        lambda k, v, a: a + 1, lambda k, a, b: a + b, True),
                  store, [("u", 1, 0), ("u", 1, 20), ("u", 1, 8), ("u", 1, 4)])
    assert out == [
        (Windowed("u", SessionWindow(0, 0)), 1, None, 0),
        (Windowed("u", SessionWindow(20, 20)), 1, None, 20),
        (Windowed("u", SessionWindow(8, 8)), 1, None, 8),
        # 4 bridges [0,0] and [8,8]: both are retracted, one merged session replaces them
        (Windowed("u", SessionWindow(0, 0)), None, 1, 0),
        (Windowed("u", SessionWindow(8, 8)), None, 1, 8),
        (Windowed("u", SessionWindow(0, 8)), 3, None, 8),
    ]


class CaptureHeaders(Processor):
    def __init__(self, sink: list) -> None:
        self.sink = sink

    def process(self, record) -> None:
        self.sink.append((record.key.window.start, record.value.new_value, record.headers))


def test_flushed_window_results_carry_the_headers_of_their_last_update():
    windows = TimeWindows.of_size_and_grace(10, 5)
    out: list = []
    topology = (Topology()
                .add_source("src", "input", key_serde=Serdes.String(), value_serde=Serdes.Long())
                .add_processor("agg", lambda: KStreamWindowAggregate(windows, "counts", lambda: 0,
                                                                     lambda k, v, a: a + 1), "src")
                .add_state_store(_count_store().with_caching_enabled(), "agg")
                .add_processor("capture", lambda: CaptureHeaders(out), "agg"))
    with TopologyTestDriver(topology, PROPS, commit_per_record=False) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.Long())
        topic.pipe_input("a", 1, 1, headers=[("trace", b"first")])
        topic.pipe_input("a", 1, 12, headers=[("trace", b"second")])
        topic.pipe_input("a", 1, 5, headers=[("trace", b"late-but-open")])
        driver.commit()
    assert sorted(out) == [(0, 2, (("trace", b"late-but-open"),)), (10, 1, (("trace", b"second"),))]
