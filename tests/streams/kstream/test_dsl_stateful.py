"""Aggregations and KTables behave as Kafka Streams documents them (caching, old values, tombstones)."""

from __future__ import annotations

import pytest

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    Grouped,
    Materialized,
    Produced,
    Stores,
    StreamsBuilder,
    TopologyTestDriver,
)

S, L = Serdes.String(), Serdes.Long()


def word_count(builder: StreamsBuilder, materialized: Materialized) -> None:
    (
        builder.stream("in")
        .flat_map_values(str.split)
        .group_by(lambda k, word: word)
        .count(materialized=materialized)
        .to_stream()
        .to("out", Produced.with_(S, L))
    )


def test_count_by_new_key_repartitions_and_counts(props):
    builder = StreamsBuilder()
    word_count(builder, Materialized.as_("counts"))
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        for line in ["a b", "a c", "b"]:
            source.pipe_input("line", line)
        out = driver.create_output_topic("out", S, L).read_key_values_to_list()
        store = driver.get_key_value_store("counts")
        assert dict(store.all()) == {"a": 2, "b": 2, "c": 1}
        assert store.get("a") == 2
        assert driver.get_timestamped_key_value_store("counts").get("a").value == 2
        assert "app-counts-repartition" in driver.produced
        assert [(k, L.deserialize("t", v)) for k, v, _ in driver.producer_records("app-counts-changelog")][
            -1
        ] == (b"b", 2)
    # the driver commits after every record, so each update is emitted
    assert out == [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("b", 2)]


def test_caching_compacts_updates_until_commit(props):
    builder = StreamsBuilder()
    word_count(builder, Materialized.as_("counts"))
    with TopologyTestDriver(builder.build(), props, commit_per_record=False) as driver:
        source = driver.create_input_topic("in", S, S)
        for line in ["a b", "a c", "b", "a"]:
            source.pipe_input("line", line)
        output = driver.create_output_topic("out", S, L)
        assert output.is_empty()
        driver.advance_wall_clock_time(30_000)  # commit.interval.ms
        assert output.read_key_values_to_list() == [("c", 1), ("b", 2), ("a", 3)]  # dirty keys in write order


def test_caching_disabled_forwards_every_update(props):
    builder = StreamsBuilder()
    word_count(builder, Materialized.as_("counts").with_caching_disabled())
    with TopologyTestDriver(builder.build(), props, commit_per_record=False) as driver:
        source = driver.create_input_topic("in", S, S)
        for line in ["a", "a", "a"]:
            source.pipe_input("line", line)
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [
            ("a", 1),
            ("a", 2),
            ("a", 3),
        ]


def test_logging_disabled_writes_no_changelog_and_in_memory_store_works(props):
    builder = StreamsBuilder()
    word_count(builder, Materialized.as_(Stores.in_memory_key_value_store("mem")).with_logging_disabled())
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("in", S, S).pipe_input("l", "x x")
        assert dict(driver.get_key_value_store("mem").all()) == {"x": 2}
        assert not any(topic.endswith("-changelog") for topic in driver.produced)


def test_reduce_and_aggregate_with_serdes(props):
    builder = StreamsBuilder()
    grouped = builder.stream("in", Consumed.with_(S, L)).group_by_key(Grouped.with_(S, L))
    grouped.reduce(lambda a, b: a + b, materialized=Materialized.as_("sum")).to_stream().to(
        "sum", Produced.with_(S, L)
    )
    grouped.aggregate(
        lambda: "",
        lambda k, v, agg: agg + str(v),
        materialized=Materialized.as_("concat").with_value_serde(S),
    ).to_stream().to("concat")
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, L)
        for key, value in [("x", 1), ("y", 5), ("x", 2)]:
            source.pipe_input(key, value)
        assert driver.create_output_topic("sum", S, L).read_key_values_to_list() == [
            ("x", 1),
            ("y", 5),
            ("x", 3),
        ]
        assert driver.create_output_topic("concat", S, S).read_key_values_to_list() == [
            ("x", "1"),
            ("y", "5"),
            ("x", "12"),
        ]
    # group_by_key without a key change needs no repartition topic
    assert len(builder.build().describe().subtopologies) == 1


def test_aggregation_skips_null_keys_and_values_and_counts_them_dropped(props):
    builder = StreamsBuilder()
    builder.stream("in").group_by_key().count(materialized=Materialized.as_("c")).to_stream().to(
        "out", Produced.with_(S, L)
    )
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input(None, "v")
        source.pipe_input("k", None)
        source.pipe_input("k", "v")
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [("k", 1)]
        assert driver.metrics["dropped_records"] == 2


def test_aggregate_timestamp_is_the_largest_seen(props):
    builder = StreamsBuilder()
    builder.stream("in").group_by_key().count(materialized=Materialized.as_("c")).to_stream().to(
        "out", Produced.with_(S, L)
    )
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "v", timestamp=50)
        source.pipe_input("k", "v", timestamp=10)
        records = driver.create_output_topic("out", S, L).read_records_to_list()
    assert [(r.value, r.timestamp) for r in records] == [(1, 50), (2, 50)]


def test_source_table_drops_null_keys_and_deletes_on_tombstone(props):
    builder = StreamsBuilder()
    builder.table("users", materialized=Materialized.as_("users-store")).to_stream().to("out")
    with TopologyTestDriver(builder.build(), props) as driver:
        users = driver.create_input_topic("users", S, S)
        users.pipe_input("alice", "v1")
        users.pipe_input(None, "ignored")
        users.pipe_input("alice", "v2")
        users.pipe_input("alice", None)
        out = driver.create_output_topic("out", S, S).read_key_values_to_list()
        assert driver.get_key_value_store("users-store").get("alice") is None
        assert driver.metrics["dropped_records"] == 1
    assert out == [("alice", "v1"), ("alice", "v2"), ("alice", None)]


def test_materialized_source_table_forwards_through_the_cache(props):
    builder = StreamsBuilder()
    table = builder.table("t", materialized=Materialized.as_("t-store"))
    assert table.queryable_store_name == "t-store"
    table.to_stream().to("out")
    with TopologyTestDriver(builder.build(), props, commit_per_record=False) as driver:
        source = driver.create_input_topic("t", S, S)
        for value in ["1", "2", "3"]:
            source.pipe_input("k", value)
        output = driver.create_output_topic("out", S, S)
        assert output.is_empty()
        driver.commit()
        assert output.read_key_values_to_list() == [("k", "3")]


def test_unmaterialized_table_forwards_every_update_and_is_not_queryable(props):
    builder = StreamsBuilder()
    table = builder.table("t")
    assert table.queryable_store_name is None
    table.to_stream().to("out")
    with TopologyTestDriver(builder.build(), props, commit_per_record=False) as driver:
        source = driver.create_input_topic("t", S, S)
        for value in ["1", "2"]:
            source.pipe_input("k", value)
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["1", "2"]


def test_table_filter_forwards_tombstone_for_filtered_out_update(props):
    builder = StreamsBuilder()
    builder.table("t").filter(lambda k, v: int(v) > 10).to_stream().to("out")
    builder.table("t2").map_values(lambda v: int(v) * 2).to_stream().to("doubled", Produced.with_(S, L))
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("t", S, S)
        source.pipe_input("k", "50")
        source.pipe_input("k", "5")
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("k", "50"), ("k", None)]
        driver.create_input_topic("t2", S, S).pipe_input("k", "21")
        assert driver.create_output_topic("doubled", S, L).read_key_values_to_list() == [("k", 42)]


def test_table_group_by_subtracts_old_value_from_old_group(props):
    builder = StreamsBuilder()
    # user -> region; count users per region
    (
        builder.table("user-region")
        .group_by(lambda user, region: (region, user))
        .count(materialized=Materialized.as_("per-region"))
        .to_stream()
        .to("out", Produced.with_(S, L))
    )
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("user-region", S, S)
        source.pipe_input("alice", "eu")
        source.pipe_input("bob", "eu")
        source.pipe_input("alice", "us")
        source.pipe_input("bob", None)
        store = driver.get_key_value_store("per-region")
        assert dict(store.all()) == {"eu": 0, "us": 1}
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [
            ("eu", 1),
            ("eu", 2),
            ("eu", 1),
            ("us", 1),
            ("eu", 0),
        ]


def test_table_group_by_reduce_with_adder_and_subtractor(props):
    builder = StreamsBuilder()
    (
        builder.table("scores", Consumed.with_(S, L))
        .group_by(lambda player, score: ("total", score), Grouped.with_(S, L))
        .reduce(lambda a, b: a + b, lambda a, b: a - b, materialized=Materialized.as_("total"))
        .to_stream()
        .to("out", Produced.with_(S, L))
    )
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("scores", S, L)
        source.pipe_input("p1", 10)
        source.pipe_input("p2", 5)
        source.pipe_input("p1", 3)
        assert driver.get_key_value_store("total").get("total") == 8


def test_stream_to_table(props):
    builder = StreamsBuilder()
    builder.stream("in").to_table(materialized=Materialized.as_("latest")).to_stream().to("out")
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "1")
        source.pipe_input("k", "2")
        assert driver.get_key_value_store("latest").get("k") == "2"
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["1", "2"]


def test_rocksdb_store_files_live_under_state_dir(props, tmp_path):
    builder = StreamsBuilder()
    word_count(builder, Materialized.as_("counts"))
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("in", S, S).pipe_input("l", "a")
        task_dir = tmp_path / "state" / "app" / "1_0"
        assert task_dir.is_dir() and any(task_dir.iterdir())


def test_group_by_through_a_filtered_table_subtracts_filtered_out_updates(props):
    builder = StreamsBuilder()
    (
        builder.table("user-region")
        .filter(lambda user, region: region != "hidden")
        .group_by(lambda user, region: (region, user))
        .count(materialized=Materialized.as_("visible-per-region"))
    )
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("user-region", S, S)
        source.pipe_input("alice", "eu")
        source.pipe_input("bob", "eu")
        source.pipe_input("alice", "hidden")  # leaves eu, counted nowhere
        source.pipe_input("bob", "us")
        assert dict(driver.get_key_value_store("visible-per-region").all()) == {"eu": 0, "us": 1}


def test_materialized_filter_and_map_values_are_queryable(props):
    builder = StreamsBuilder()
    table = builder.table("t", Consumed.with_(S, L))
    big = table.filter(lambda k, v: v > 10, materialized=Materialized.as_("big").with_value_serde(L))
    doubled = big.map_values(lambda v: v * 2, materialized=Materialized.as_("doubled").with_value_serde(L))
    assert (big.queryable_store_name, doubled.queryable_store_name) == ("big", "doubled")
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("t", S, L)
        source.pipe_input("a", 50)
        source.pipe_input("b", 5)
        source.pipe_input("a", 7)
        source.pipe_input("c", 11)
        assert dict(driver.get_key_value_store("big").all()) == {"c": 11}
        assert dict(driver.get_key_value_store("doubled").all()) == {"c": 22}


def test_named_and_materialized_in_either_position_as_kafkas_overloads(props):
    from strom.streams import Named

    builder = StreamsBuilder()
    grouped = builder.stream("in").group_by_key()
    grouped.count(Materialized.as_("by-position"))
    grouped.count(Named.as_("counter"), Materialized.as_("both"))
    builder.table("t", Materialized.as_("table-store"))
    names = {node.name for sub in builder.build().describe().subtopologies for node in sub.nodes}
    assert "counter" in names
    assert set(builder.build().internal.store_builders) >= {"by-position", "both", "table-store"}
    with pytest.raises(TopologyError, match="at most one Named and one Materialized"):
        grouped.count(Materialized.as_("x"), Materialized.as_("y"))
