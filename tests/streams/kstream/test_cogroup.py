"""KGroupedStream.cogroup: several grouped streams, one aggregate per key (Kafka's KIP-150)."""

from __future__ import annotations

import pytest

from strom.errors import CoPartitioningError, TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Grouped,
    Materialized,
    Named,
    Produced,
    SessionWindows,
    StreamsBuilder,
    TimeWindows,
    TopologyTestDriver,
    Window,
    Windowed,
    WindowedSerdes,
)

S, L, J = Serdes.String(), Serdes.Long(), Serdes.Json()


def add_click(key, value, agg):
    return {**agg, "clicks": agg["clicks"] + 1}


def add_view(key, value, agg):
    return {**agg, "views": agg["views"] + int(value)}


def start():
    return {"clicks": 0, "views": 0}


def clicks_and_views(builder: StreamsBuilder, materialized: Materialized):
    clicks = builder.stream("clicks").group_by_key()
    views = builder.stream("views").group_by_key()
    return clicks.cogroup(add_click).cogroup(views, add_view).aggregate(start, materialized)


def test_each_input_updates_one_aggregate_with_its_own_aggregator(props):
    builder = StreamsBuilder()
    table = clicks_and_views(builder, Materialized.as_("activity").with_value_serde(J)
                             .with_caching_disabled())
    table.to_stream().to("out", Produced.with_(S, J))
    with TopologyTestDriver(builder.build(), props) as driver:
        clicks = driver.create_input_topic("clicks", S, S)
        views = driver.create_input_topic("views", S, S)
        clicks.pipe_input("alice", "c", timestamp=1)
        views.pipe_input("alice", "3", timestamp=2)
        views.pipe_input("bob", "5", timestamp=3)
        clicks.pipe_input("alice", "c", timestamp=4)
        clicks.pipe_input(None, "c", timestamp=5)  # null keys are skipped
        views.pipe_input("bob", None, timestamp=6)  # and null values
        out = driver.create_output_topic("out", S, J).read_records_to_list()
        store = driver.get_key_value_store("activity")
        assert dict(store.all()) == {"alice": {"clicks": 2, "views": 3}, "bob": {"clicks": 0, "views": 5}}
        assert driver.metrics["dropped_records"] == 2
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("alice", {"clicks": 1, "views": 0}, 1),
        ("alice", {"clicks": 1, "views": 3}, 2),
        ("bob", {"clicks": 0, "views": 5}, 3),
        ("alice", {"clicks": 2, "views": 3}, 4),
    ]


def test_with_caching_the_table_emits_each_key_once_per_commit(props):
    builder = StreamsBuilder()
    clicks_and_views(builder, Materialized.as_("activity").with_value_serde(J)).to_stream().to(
        "out", Produced.with_(S, J))
    with TopologyTestDriver(builder.build(), {**props, "commit.interval.ms": 60_000},
                            commit_per_record=False) as driver:
        clicks = driver.create_input_topic("clicks", S, S)
        views = driver.create_input_topic("views", S, S)
        for i in range(3):
            clicks.pipe_input("alice", "c", timestamp=i)
            views.pipe_input("alice", "2", timestamp=i)
        out = driver.create_output_topic("out", S, J)
        assert out.is_empty()
        driver.advance_wall_clock_time(60_000)  # the commit flushes the cache
        assert out.read_key_values_to_list() == [("alice", {"clicks": 3, "views": 6})]


def test_an_input_whose_key_changed_is_repartitioned_and_the_table_feeds_later_operators(props):
    builder = StreamsBuilder()
    by_page = builder.stream("clicks").group_by(lambda user, page: page, Grouped.as_("by-page"))
    impressions = builder.stream("impressions").group_by_key()
    totals = (by_page.cogroup(lambda k, v, agg: agg + 1)
              .cogroup(impressions, lambda k, v, agg: agg + int(v))
              .aggregate(lambda: 0, Named.as_("page-total"),
                         Materialized.with_(S, L).with_caching_disabled()))
    totals.filter(lambda page, total: total >= 10).to_stream().to("popular", Produced.with_(S, L))
    topology = builder.build()
    description = str(topology.describe())
    assert "by-page-repartition" in description and "page-total" in description
    with TopologyTestDriver(topology, props) as driver:
        driver.create_input_topic("clicks", S, S).pipe_input("alice", "/home")
        impressions_topic = driver.create_input_topic("impressions", S, S)
        impressions_topic.pipe_input("/home", "8")
        impressions_topic.pipe_input("/cart", "20")
        driver.create_input_topic("clicks", S, S).pipe_input("bob", "/home")
        # the aggregate sends old values anyway, so the filter drops the deletions of rows it never
        # let through (as Kafka Streams' KTableFilter does: KAFKA-10077)
        assert driver.create_output_topic("popular", S, L).read_key_values_to_list() == [
            ("/cart", 20), ("/home", 10)]


def test_inputs_must_be_copartitioned():
    builder = StreamsBuilder()
    clicks_and_views(builder, Materialized.as_("activity"))
    internal = builder.build().internal
    assert internal.topic_partitions({"clicks": 3, "views": 3})["views"] == 3
    with pytest.raises(CoPartitioningError, match="same number of partitions"):
        internal.topic_partitions({"clicks": 3, "views": 2})


def test_cogroup_mistakes_are_clear_errors():
    builder = StreamsBuilder()
    clicks = builder.stream("clicks").group_by_key()
    cogrouped = clicks.cogroup(add_click)
    with pytest.raises(TopologyError, match="cogrouped already"):
        cogrouped.cogroup(clicks, add_view)
    with pytest.raises(TopologyError, match="different StreamsBuilders"):
        cogrouped.cogroup(StreamsBuilder().stream("views").group_by_key(), add_view)
    with pytest.raises(TopologyError, match="needs an aggregator"):
        builder.stream("views").group_by_key().cogroup("not a function")


@pytest.mark.parametrize("caching", [True, False])
def test_a_regrouping_of_the_table_gets_old_values_from_every_input(props, caching):
    builder = StreamsBuilder()
    per_user = Materialized.with_(S, L) if caching else Materialized.with_(S, L).with_caching_disabled()
    events = (builder.stream("clicks").group_by_key().cogroup(lambda k, v, agg: agg + 1)
              .cogroup(builder.stream("views").group_by_key(), lambda k, v, agg: agg + int(v))
              .aggregate(lambda: 0, per_user))
    (events.group_by(lambda user, total: ("all", total), Grouped.with_(S, L))
     .reduce(lambda a, b: a + b, lambda a, b: a - b, Materialized.as_("grand-total")))
    with TopologyTestDriver(builder.build(), props) as driver:
        clicks = driver.create_input_topic("clicks", S, S)
        views = driver.create_input_topic("views", S, S)
        for user in ("alice", "bob", "alice"):
            clicks.pipe_input(user, "c")
            views.pipe_input(user, "10")
        # 3 clicks + 30 views; without old values each update would be added again, not replaced
        assert driver.get_key_value_store("grand-total").get("all") == 33


def windowed_clicks_and_views(builder, windows, materialized):
    clicks = builder.stream("clicks").group_by_key()
    views = builder.stream("views").group_by_key()
    return (clicks.cogroup(lambda k, v, agg: agg + 1).cogroup(views, lambda k, v, agg: agg + 100)
            .windowed_by(windows))


def pipe_clicks_and_views(driver, events):
    topics = {name: driver.create_input_topic(name, S, S) for name in ("clicks", "views")}
    for topic, key, timestamp in events:
        topics[topic].pipe_input(key, "x", timestamp=timestamp)


def test_time_windowed_cogroup_aggregates_each_window_from_every_input(props):
    builder = StreamsBuilder()
    windowed = windowed_clicks_and_views(builder, TimeWindows.of_size_with_no_grace(10), None)
    table = windowed.aggregate(lambda: 0, materialized=Materialized.as_("per-window")
                               .with_value_serde(L).with_caching_disabled().with_retention(1000))
    windowed_key = WindowedSerdes.time_windowed_serde_from(S, 10)
    table.to_stream().to("out", Produced.with_(windowed_key, L))
    with TopologyTestDriver(builder.build(), props) as driver:
        pipe_clicks_and_views(driver, [("clicks", "a", 1), ("views", "a", 5), ("views", "a", 12),
                                       ("clicks", "b", 13)])
        out = driver.create_output_topic("out", windowed_key, L).read_key_values_to_list()
        store = driver.get_window_store("per-window")
        assert [(w.key, w.window.start, v) for w, v in store.all()] == [("a", 0, 101), ("a", 10, 100),
                                                                       ("b", 10, 1)]
    assert out == [(Windowed("a", Window(0, 10)), 1), (Windowed("a", Window(0, 10)), 101),
                   (Windowed("a", Window(10, 20)), 100), (Windowed("b", Window(10, 20)), 1)]


def test_session_windowed_cogroup_merges_sessions_bridged_by_either_input(props):
    builder = StreamsBuilder()
    windowed = windowed_clicks_and_views(builder, SessionWindows.of_inactivity_gap_with_no_grace(5), None)
    windowed.aggregate(lambda: 0, lambda k, left, right: left + right,
                       materialized=Materialized.as_("sessions").with_value_serde(L).with_retention(1000))
    with TopologyTestDriver(builder.build(), props) as driver:
        # a click at 0 and a view at 10 are two sessions until a click at 5 bridges them
        pipe_clicks_and_views(driver, [("clicks", "a", 0), ("views", "a", 10), ("clicks", "a", 5),
                                       ("views", "a", 30)])
        sessions = [(w.window.start, w.window.end, v)
                    for w, v in driver.get_session_store("sessions").fetch("a")]
    assert sessions == [(0, 10, 102), (30, 30, 100)]
