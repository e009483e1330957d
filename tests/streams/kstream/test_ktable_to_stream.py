"""KTable.to_stream(mapper): the KeyValueMapper form keys the changelog stream by mapper(key, value)."""

from __future__ import annotations

import pytest

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import Consumed, Materialized, Named, Produced, StreamsBuilder, TopologyTestDriver

S, L = Serdes.String(), Serdes.Long()


def test_mapper_rekeys_updates_and_deletions(props):
    builder = StreamsBuilder()
    table = builder.table("users", Consumed.with_(S, S))
    table.to_stream(lambda key, value: f"{key}/{value}").to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        users = driver.create_input_topic("users", S, S)
        users.pipe_input("u1", "eu")
        users.pipe_input("u1", None)
        out = driver.create_output_topic("out", S, S).read_key_values_to_list()
    assert out == [("u1/eu", "eu"), ("u1/None", None)]


def test_an_aggregation_after_the_new_key_reads_through_a_repartition_topic(props):
    builder = StreamsBuilder()
    (
        builder.table("users", Consumed.with_(S, S))
        .to_stream(lambda user, region: region)
        .group_by_key()
        .count(Materialized.as_("signups-per-region"))
    )
    topology = builder.build()
    assert len(topology.describe().subtopologies) == 2
    with TopologyTestDriver(topology, props) as driver:
        users = driver.create_input_topic("users", S, S)
        for user, region in [("u1", "eu"), ("u2", "us"), ("u3", "eu")]:
            users.pipe_input(user, region)
        assert dict(driver.get_key_value_store("signups-per-region").all()) == {"eu": 2, "us": 1}
        assert any(t.endswith("-repartition") for t in driver.produced_topic_names())


def test_named_forms_name_the_to_stream_node():
    builder = StreamsBuilder()
    table = builder.table("t")
    table.to_stream(Named.as_("plain")).to("a")
    table.to_stream(lambda k, v: v, Named.as_("rekeyed")).to("b")
    names = {node.name for sub in builder.build().describe().subtopologies for node in sub.nodes}
    assert {"plain", "rekeyed"} <= names


def test_two_named_arguments_are_refused():
    table = StreamsBuilder().table("t")
    with pytest.raises(TopologyError, match="one Named"):
        table.to_stream(Named.as_("a"), Named.as_("b"))
