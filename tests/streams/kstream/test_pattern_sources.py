"""StreamsBuilder.stream(re.Pattern): Kafka's pattern sources, described and routed as Kafka Streams does."""

from __future__ import annotations

import re

import pytest

from strom.errors import CoPartitioningError, TopologyError, UnknownTopicError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    FixedKeyProcessor,
    Materialized,
    Produced,
    StreamsBuilder,
    Topology,
    TopologyTestDriver,
)

S, L = Serdes.String(), Serdes.Long()
ORDERS = re.compile(r"orders-\w+")


class TagWithTopic(FixedKeyProcessor):
    """Forwards each value prefixed with the topic it was read from."""

    def process(self, record):
        topic = self.context.record_metadata().topic
        self.context.forward(record.with_value(f"{topic}:{record.value}"))


def test_describe_prints_the_pattern_as_kafka_streams_does():
    builder = StreamsBuilder()
    builder.stream(ORDERS).to("out")
    assert str(builder.build().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: orders-\\w+)\n"
        "      --> KSTREAM-SINK-0000000001\n"
        "    Sink: KSTREAM-SINK-0000000001 (topic: out)\n"
        "      <-- KSTREAM-SOURCE-0000000000\n\n"
    )


def test_driver_routes_every_matching_topic_through_the_pattern_source(props):
    builder = StreamsBuilder()
    builder.stream(ORDERS, Consumed.with_(S, S)).process_values(TagWithTopic).to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        eu = driver.create_input_topic("orders-eu", S, S)
        us = driver.create_input_topic("orders-us", S, S)
        eu.pipe_input("a", "1")
        us.pipe_input("b", "2")
        eu.pipe_input("c", "3")
        out = driver.create_output_topic("out", S, S).read_key_values_to_list()
        assert out == [("a", "orders-eu:1"), ("b", "orders-us:2"), ("c", "orders-eu:3")]
        with pytest.raises(UnknownTopicError, match="and the topics matching"):
            driver.create_input_topic("orders", S, S)  # the pattern must match the whole name
        with pytest.raises(UnknownTopicError):
            driver.create_input_topic("payments-eu", S, S)


def test_aggregation_over_a_pattern_stream_counts_across_topics(props):
    builder = StreamsBuilder()
    (
        builder.stream(ORDERS, Consumed.with_(S, S))
        .group_by_key()
        .count(Materialized.as_("orders-per-customer"))
    )
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("orders-eu", S, S).pipe_input("alice", "x")
        driver.create_input_topic("orders-us", S, S).pipe_input("alice", "y")
        driver.create_input_topic("orders-us", S, S).pipe_input("bob", "z")
        store = driver.get_key_value_store("orders-per-customer")
        assert dict(store.all()) == {"alice": 2, "bob": 1}
        # the store's own changelog matches no pattern: it is never read back as input
        assert "app-orders-per-customer-changelog" in driver.produced_topic_names()


def test_records_the_topology_writes_to_a_matching_topic_are_read_back(props):
    builder = StreamsBuilder()
    builder.stream("raw", Consumed.with_(S, S)).to("orders-internal", Produced.with_(S, S))
    builder.stream(ORDERS, Consumed.with_(S, S)).map_values(str.upper).to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("raw", S, S).pipe_input("k", "v")
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("k", "V")]


def test_runtime_planning_resolves_the_pattern_against_existing_topics():
    builder = StreamsBuilder()
    builder.stream(ORDERS).map_values(str.upper).to("out")
    internal = builder.build().internal
    internal.application_id = "app"
    existing = {
        "orders-eu": 2,
        "orders-us": 3,
        "payments": 4,
        "__consumer_offsets": 50,
        "app-orders-KSTREAM-x-changelog": 1,
    }
    assert internal.topic_partitions(existing) == {"orders-eu": 2, "orders-us": 3}
    assert internal.subtopologies()[0].source_topics == ["orders-eu", "orders-us"]
    assert internal.task_ids(existing) == [(0, 0), (0, 1), (0, 2)]


def test_state_read_across_matched_topics_needs_them_co_partitioned():
    builder = StreamsBuilder()
    builder.stream(ORDERS).group_by_key().count()
    internal = builder.build().internal
    assert internal.topic_partitions({"orders-eu": 3, "orders-us": 3}) == {"orders-eu": 3, "orders-us": 3}
    with pytest.raises(CoPartitioningError, match="orders-eu"):
        internal.topic_partitions({"orders-eu": 2, "orders-us": 3})


def test_a_join_with_a_pattern_stream_checks_co_partitioning():
    builder = StreamsBuilder()
    customers = builder.table("customers")
    builder.stream(ORDERS).join(customers, lambda order, customer: (order, customer)).to("out")
    internal = builder.build().internal
    assert internal.task_ids({"orders-eu": 2, "customers": 2}) == [(0, 0), (0, 1)]
    with pytest.raises(CoPartitioningError, match="customers"):
        internal.topic_partitions({"orders-eu": 2, "customers": 4})


def test_a_pattern_matching_no_topic_fails_planning_with_a_clear_error():
    builder = StreamsBuilder()
    builder.stream(ORDERS).to("out")
    with pytest.raises(TopologyError, match="no topic matches"):
        builder.build().internal.topic_partitions({"payments": 1})


def test_a_topic_may_not_be_read_by_a_pattern_and_by_name():
    builder = StreamsBuilder()
    builder.stream("orders-eu")
    with pytest.raises(TopologyError, match="matches topic 'orders-eu'"):
        builder.stream(ORDERS)
    builder = StreamsBuilder()
    builder.stream(ORDERS)
    with pytest.raises(TopologyError, match="matches the pattern"):
        builder.stream("orders-eu")


def test_overlapping_patterns_fail_when_a_topic_matches_both(props):
    builder = StreamsBuilder()
    builder.stream(ORDERS).to("a")
    builder.stream(re.compile(r".*-eu")).to("b")
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("orders-us", S, S)
        with pytest.raises(TopologyError, match="matches the patterns of sources"):
            driver.create_input_topic("orders-eu", S, S)


def test_processor_api_source_takes_one_pattern(props):
    topology = (
        Topology()
        .add_source("orders", ORDERS, key_serde=S, value_serde=S)
        .add_processor("tag", TagWithTopic, "orders")
        .add_sink("out", "out", "tag", key_serde=S, value_serde=S)
    )
    assert "Source: orders (topics: orders-\\w+)" in str(topology.describe())
    with TopologyTestDriver(topology, props) as driver:
        driver.create_input_topic("orders-eu", S, S).pipe_input("k", "v")
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["orders-eu:v"]
    with pytest.raises(TopologyError, match="either named topics or one pattern"):
        Topology().add_source("mixed", "payments", ORDERS)
