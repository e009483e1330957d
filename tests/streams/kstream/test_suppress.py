"""KTable.suppress: one final result per window and key; time-limited rate limiting; full buffers;
the buffer is logged and restored."""

import struct

import pytest

from strom.errors import SuppressionBufferFullError
from strom.kafka.serdes import Serdes
from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.options import Consumed, Materialized, Produced
from strom.streams.kstream.suppressed import BufferConfig, Suppressed
from strom.streams.kstream.windowed_serdes import WindowedSerdes
from strom.streams.kstream.windows import TimeWindows, Window, Windowed
from strom.streams.state.context import ChangelogRecord
from strom.streams.test_driver import TopologyTestDriver

PROPS = {"application.id": "suppress", "default.key.serde": "String", "default.value.serde": "String"}
WINDOWED = WindowedSerdes.time_windowed_serde_from(Serdes.String(), 10)


def _windowed_counts(suppressed, grace=5):
    builder = StreamsBuilder()
    (builder.stream("input", Consumed.with_(Serdes.String(), Serdes.String())).group_by_key()
     .windowed_by(TimeWindows.of_size_and_grace(10, grace))
     .count(materialized=Materialized.as_("counts").with_caching_disabled())
     .suppress(suppressed.with_name("final"))
     .to_stream().to("output", Produced.with_(WINDOWED, Serdes.Long())))
    return builder.build()


def _pipe(driver, records):
    topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
    for key, timestamp in records:
        topic.pipe_input(key, "v", timestamp)
    return driver.create_output_topic("output", WINDOWED, Serdes.Long()).read_key_values_to_list()


def test_until_window_closes_emits_one_final_result_per_window_and_key():
    topology = _windowed_counts(Suppressed.until_window_closes(BufferConfig.unbounded()))
    with TopologyTestDriver(topology, PROPS) as driver:
        out = _pipe(driver, [("a", 1), ("a", 2), ("b", 3), ("a", 9), ("a", 12), ("b", 14)])
        # window [0,10) closes at stream time 10 + grace 5 = 15: nothing final yet
        assert out == []
        more = _pipe(driver, [("c", 15), ("a", 16), ("a", 26)])
        assert more == [(Windowed("a", Window(0, 10)), 3), (Windowed("b", Window(0, 10)), 1),
                        (Windowed("a", Window(10, 20)), 2), (Windowed("b", Window(10, 20)), 1),
                        (Windowed("c", Window(10, 20)), 1)]


def test_a_windowed_table_s_own_key_serde_serves_the_buffer_without_default_serdes():
    """Found by the Kafka Streams pair: the buffer took the task's default key serde even when the
    windowed table's keys had the grouping's serde, and failed where no default was set."""
    with TopologyTestDriver(_windowed_counts(Suppressed.until_window_closes(BufferConfig.unbounded())),
                            {"application.id": "suppress"}) as driver:
        assert _pipe(driver, [("a", 1), ("a", 20)]) == [(Windowed("a", Window(0, 10)), 1)]


def test_until_time_limit_rate_limits_per_key():
    builder = StreamsBuilder()
    (builder.table("input", Consumed.with_(Serdes.String(), Serdes.String()))
     .suppress(Suppressed.until_time_limit(10, BufferConfig.max_records(100)))
     .to_stream().to("output"))
    with TopologyTestDriver(builder.build(), PROPS) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        rows = [("k", "1", 0), ("k", "2", 5), ("j", "x", 6), ("k", "3", 10), ("j", "y", 20)]
        for key, value, timestamp in rows:
            topic.pipe_input(key, value, timestamp)
        out = driver.create_output_topic("output", Serdes.String(), Serdes.String()).read_key_values_to_list()
    # k's first update waited from 0 to stream time 10 and went out as its latest value; j (buffered
    # at 6) went out at stream time 20 with the update that arrived then
    assert out == [("k", "3"), ("j", "y")]


def test_full_buffer_emits_early_or_shuts_down():
    builder = StreamsBuilder()
    (builder.table("input", Consumed.with_(Serdes.String(), Serdes.String()))
     .suppress(Suppressed.until_time_limit(1_000, BufferConfig.max_records(2).emit_early_when_full()))
     .to_stream().to("output"))
    with TopologyTestDriver(builder.build(), PROPS) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        for key, timestamp in [("a", 1), ("b", 2), ("c", 3)]:
            topic.pipe_input(key, key.upper(), timestamp)
        out = driver.create_output_topic("output", Serdes.String(), Serdes.String()).read_key_values_to_list()
    assert out == [("a", "A")]
    strict = BufferConfig.max_records(1).shut_down_when_full()
    topology = _windowed_counts(Suppressed.until_window_closes(strict))
    with TopologyTestDriver(topology, PROPS) as driver, pytest.raises(SuppressionBufferFullError):
        _pipe(driver, [("a", 1), ("b", 2)])


def test_suppression_buffer_is_logged_and_restored():
    topology = _windowed_counts(Suppressed.until_window_closes(BufferConfig.unbounded()))
    with TopologyTestDriver(topology, PROPS) as driver:
        _pipe(driver, [("a", 1), ("a", 2), ("b", 3)])
        changelog = driver.producer_records("suppress-final-store-changelog")
        buffer = driver.get_state_store("final-store")
        assert len(buffer) == 2
    assert [key for key, _, _ in changelog] == [WINDOWED.serialize("t", Windowed("a", Window(0, 10))),
                                               WINDOWED.serialize("t", Windowed("a", Window(0, 10))),
                                               WINDOWED.serialize("t", Windowed("b", Window(0, 10)))]
    with TopologyTestDriver(topology, PROPS) as restored:
        buffer = restored.get_state_store("final-store")
        buffer.restore([ChangelogRecord(k, v, offset, ts) for offset, (k, v, ts) in enumerate(changelog)])
        assert len(buffer) == 2
        out = _pipe(restored, [("c", 30)])
        assert out == [(Windowed("a", Window(0, 10)), 2), (Windowed("b", Window(0, 10)), 1)]


def test_a_restored_buffer_emits_the_latest_record_s_headers():
    topology = _windowed_counts(Suppressed.until_window_closes(BufferConfig.unbounded()))
    with TopologyTestDriver(topology, PROPS) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        topic.pipe_input("a", "v", 1, headers=[("h", b"first")])
        topic.pipe_input("a", "v", 2, headers=[("h", b"second"), ("empty", None)])
        changelog = driver.producer_records("suppress-final-store-changelog")
    with TopologyTestDriver(topology, PROPS) as restored:
        restored.get_state_store("final-store").restore(
            [ChangelogRecord(k, v, offset, ts) for offset, (k, v, ts) in enumerate(changelog)])
        restored.create_input_topic("input", Serdes.String(), Serdes.String()).pipe_input("c", "v", 30)
        [record] = restored.create_output_topic("output", WINDOWED, Serdes.Long()).read_records_to_list()
    assert (record.key, record.value) == (Windowed("a", Window(0, 10)), 2)
    assert list(record.headers) == [("h", b"second"), ("empty", None)]


def test_final_session_results_once_the_session_closes():
    from strom.streams.kstream.windows import SessionWindow, SessionWindows

    sessions = WindowedSerdes.session_windowed_serde_from(Serdes.String())
    builder = StreamsBuilder()
    (builder.stream("input", Consumed.with_(Serdes.String(), Serdes.String())).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 2)).count()
     .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
     .to_stream().to("output", Produced.with_(sessions, Serdes.Long())))
    with TopologyTestDriver(builder.build(), PROPS) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        output = driver.create_output_topic("output", sessions, Serdes.Long())
        for timestamp in (0, 3, 6):  # one growing session [0, 6]: merged twice, never final yet
            topic.pipe_input("u", "v", timestamp)
        topic.pipe_input("w", "v", 8)  # stream time 8 = end 6 + grace 2, but a record within the gap
        assert output.read_key_values_to_list() == []
        topic.pipe_input("u", "v", 9)  # still joins it (as in Kafka): [0, 9]
        topic.pipe_input("w", "v", 15)  # stream time 8 + gap 5 + grace 2: [8, 8] still takes a late w@10
        assert output.read_key_values_to_list() == []
        topic.pipe_input("w", "v", 16)  # [8, 8] is closed once its end is before 16 - 5 - 2
        assert output.read_key_values_to_list() == [(Windowed("w", SessionWindow(8, 8)), 1)]
        topic.pipe_input("w", "v", 17)  # and [0, 9] at 17
        assert output.read_key_values_to_list() == [(Windowed("u", SessionWindow(0, 9)), 4)]


def test_a_final_session_result_is_never_followed_by_a_merged_one():
    """Issue 43: a session suppressed at stream time end + gap + grace was emitted as final, then the
    aggregator (which merges into it until then) emitted a bigger "final" session: 3 views counted for 2."""
    from strom.streams.kstream.windows import SessionWindow, SessionWindows

    sessions = WindowedSerdes.session_windowed_serde_from(Serdes.String())
    builder = StreamsBuilder()
    (builder.stream("input", Consumed.with_(Serdes.String(), Serdes.String())).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5000, 2000)).count()
     .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
     .to_stream().to("output", Produced.with_(sessions, Serdes.Long())))
    with TopologyTestDriver(builder.build(), PROPS) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        for key, timestamp in (("alice", 1000), ("bob", 8000), ("alice", 2000), ("bob", 20000)):
            topic.pipe_input(key, "view", timestamp)
        out = driver.create_output_topic("output", sessions, Serdes.Long()).read_key_values_to_list()
    assert out == [(Windowed("alice", SessionWindow(1000, 2000)), 2),
                   (Windowed("bob", SessionWindow(8000, 8000)), 1)]


def test_buffer_config_logging_can_be_disabled_or_configured():
    unlogged_buffer = BufferConfig.unbounded().with_logging_disabled()
    unlogged = _windowed_counts(Suppressed.until_window_closes(unlogged_buffer))
    with TopologyTestDriver(unlogged, PROPS) as driver:
        out = _pipe(driver, [("a", 1), ("a", 2), ("b", 20)])
        assert out == [(Windowed("a", Window(0, 10)), 2)]  # it still suppresses
        assert "suppress-final-store-changelog" not in driver.produced_topic_names()
    config = BufferConfig.unbounded().with_logging_disabled().with_logging_enabled({"retention.ms": "1000"})
    assert (config.logging_enabled, dict(config.log_config)) == (True, {"retention.ms": "1000"})
    topology = _windowed_counts(Suppressed.until_window_closes(config))
    assert topology.internal.store_builders["final-store"].log_config == {"retention.ms": "1000"}
    with TopologyTestDriver(topology, PROPS) as driver:
        _pipe(driver, [("a", 1)])
        assert "suppress-final-store-changelog" in driver.produced_topic_names()


def _suppressed_outer_join():
    """A suppressed table outer-joined with an empty one: its deletions show the old value suppress sends."""
    builder = StreamsBuilder()
    consumed = Consumed.with_(Serdes.String(), Serdes.String())
    suppressed = builder.table("input", consumed).suppress(
        Suppressed.until_time_limit(100, BufferConfig.unbounded()).with_name("limit"))
    suppressed.outer_join(builder.table("empty", consumed), lambda a, b: f"{a}/{b}").to_stream().to("output")
    return builder.build()


def test_an_emitted_update_carries_the_old_value_of_the_latest_buffered_one():
    """As Kafka's buffer: the prior value stays that of the first buffered update (for readers of the
    table), the old value sent with the emitted one is its latest update's."""
    with TopologyTestDriver(_suppressed_outer_join(), PROPS) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        output = driver.create_output_topic("output", Serdes.String(), Serdes.String())
        topic.pipe_input("k", "1", 0)
        topic.pipe_input("k", None, 200)  # buffered: prior None, old "1", new None; emitted at once
        assert output.read_key_values_to_list() == [("k", None)]  # the join's deletion of "1/None"



def test_a_restored_buffer_keeps_prior_old_and_new_value():
    with TopologyTestDriver(_suppressed_outer_join(), PROPS) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        topic.pipe_input("k", "1", 0)
        topic.pipe_input("k", "2", 10)
        changelog = driver.producer_records("suppress-limit-store-changelog")
    key, value, _ = changelog[-1]
    # an entry logged before old values were kept apart: buffer time 0, time 10, new "2", prior None
    older = struct.pack(">qqbi", 0, 10, 1, 1) + b"2"
    with TopologyTestDriver(_suppressed_outer_join(), PROPS) as restored:
        buffer = restored.get_state_store("limit-store")
        buffer.restore([ChangelogRecord(key, value, 0, 10)])
        entry = buffer.buffered("k")
        assert (entry.prior_value, entry.old_value, entry.new_value) == (None, "1", "2")
        buffer.restore([ChangelogRecord(key, older, 1, 10)])
        entry = buffer.buffered("k")
        assert (entry.prior_value, entry.old_value, entry.new_value) == (None, None, "2")


def test_a_join_reads_a_buffered_key_s_prior_value():
    """A suppressed table read by a join shows, for a key waiting in the buffer, its value before the
    first buffered update (Kafka's suppress view); other keys read through to the parent table."""
    builder = StreamsBuilder()
    consumed = Consumed.with_(Serdes.String(), Serdes.String())
    table = builder.table("input", consumed).suppress(
        Suppressed.until_time_limit(100, BufferConfig.unbounded()))
    builder.stream("lookups", consumed).left_join(table, lambda a, b: f"{a}/{b}").to("output")
    with TopologyTestDriver(builder.build(), PROPS) as driver:
        rows = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        lookups = driver.create_input_topic("lookups", Serdes.String(), Serdes.String())
        output = driver.create_output_topic("output", Serdes.String(), Serdes.String())
        rows.pipe_input("k", "1", 0)
        rows.pipe_input("j", "2", 150)  # emits k ("1"), buffers j
        rows.pipe_input("k", "3", 160)  # buffers k with prior "1"
        for key in ("k", "j"):
            lookups.pipe_input(key, "x", 170)
        assert output.read_key_values_to_list() == [("k", "x/1"), ("j", "x/None")]
        rows.pipe_input("i", "4", 300)  # emits j and k
        for key in ("k", "j"):
            lookups.pipe_input(key, "y", 300)
        assert output.read_key_values_to_list() == [("k", "y/3"), ("j", "y/2")]


@pytest.mark.parametrize("cache_bytes", [0, 10 * 1024 * 1024])
@pytest.mark.parametrize("materialized", [False, True])
def test_a_table_operator_after_suppress_forwards_the_buffered_record_s_headers(cache_bytes, materialized):
    """As Kafka's suppress, an emitted record's context is the buffered record's: a filter after it
    forwards (or caches) the buffered headers, not those of the record whose time evicted it."""
    builder = StreamsBuilder()
    suppressed = builder.table("input", Consumed.with_(Serdes.String(), Serdes.Long())).suppress(
        Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    filtered = (suppressed.filter(lambda k, v: v % 2 == 0, Materialized.as_("kept")) if materialized
                else suppressed.filter(lambda k, v: v % 2 == 0))
    filtered.to_stream().to("output", Produced.with_(Serdes.String(), Serdes.Long()))
    props = {**PROPS, "statestore.cache.max.bytes": cache_bytes}
    with TopologyTestDriver(builder.build(props), props) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.Long())
        topic.pipe_input("a", 0, 0, headers=[("h", b"x")])
        topic.pipe_input("b", 0, 10)
        [record] = driver.create_output_topic("output", Serdes.String(), Serdes.Long()).read_records_to_list()
    assert (record.key, record.value, record.timestamp) == ("a", 0, 0)
    assert list(record.headers) == [("h", b"x")]
