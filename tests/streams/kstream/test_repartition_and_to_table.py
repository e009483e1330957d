"""KStream.repartition(Repartitioned...) and KStream.to_table(named, materialized) through the driver."""

from __future__ import annotations

from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    Materialized,
    Named,
    Produced,
    Repartitioned,
    StreamsBuilder,
    TopologyTestDriver,
)

S = Serdes.String()


def test_repartition_with_number_of_partitions_and_name(props):
    builder = StreamsBuilder()
    (
        builder.stream("in", Consumed.with_(S, S))
        .select_key(lambda key, value: value)
        .repartition(Repartitioned.with_number_of_partitions(4).with_name("by-value"))
        .group_by_key()
        .count(Materialized.as_("per-value"))
    )
    internal = builder.build().internal
    assert internal.topic_partitions({"in": 2})["by-value-repartition"] == 4
    # the count reads the repartitioned stream as it is: no second repartition topic
    assert list(internal.internal_topics) == ["by-value-repartition"]
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        for key, value in [("k1", "a"), ("k2", "a"), ("k3", "b")]:
            source.pipe_input(key, value)
        assert dict(driver.get_key_value_store("per-value").all()) == {"a": 2, "b": 1}
        assert len(driver.producer_records("app-by-value-repartition")) == 3


def test_to_table_with_name_and_materialized_keeps_the_latest_value_per_key(props):
    builder = StreamsBuilder()
    stream = builder.stream("in", Consumed.with_(S, S))
    table = stream.to_table(Named.as_("latest"), Materialized.as_("latest-store"))
    table.to_stream().to("out", Produced.with_(S, S))
    assert table.name == "latest" and table.queryable_store_name == "latest-store"
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        for key, value in [("a", "1"), ("b", "2"), ("a", "3"), ("b", None)]:
            source.pipe_input(key, value)
        assert dict(driver.get_key_value_store("latest-store").all()) == {"a": "3"}
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("a", "1"), ("b", "2"), ("a", "3"), ("b", None)
        ]
