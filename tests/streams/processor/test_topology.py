"""Topology structure: sub-topologies, describe() in Kafka Streams' shape, internal topics, tasks,
co-partitioning; and StreamsConfig validation."""

from __future__ import annotations

import re

import pytest

from strom.errors import ConfigError, CoPartitioningError, TopologyError
from strom.streams import (
    AutoOffsetReset,
    Grouped,
    Materialized,
    Named,
    Repartitioned,
    StreamsBuilder,
    StreamsConfig,
    Topology,
)

WORD_COUNT_DESCRIPTION = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [lines])
      --> KSTREAM-FLATMAPVALUES-0000000001
    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])
      --> KSTREAM-KEY-SELECT-0000000002
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])
      --> words-repartition-filter
      <-- KSTREAM-FLATMAPVALUES-0000000001
    Processor: words-repartition-filter (stores: [])
      --> words-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000002
    Sink: words-repartition-sink (topic: words-repartition)
      <-- words-repartition-filter

  Sub-topology: 1
    Source: words-repartition-source (topics: [words-repartition])
      --> KSTREAM-AGGREGATE-0000000003
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts])
      --> KTABLE-TOSTREAM-0000000004
      <-- words-repartition-source
    Processor: KTABLE-TOSTREAM-0000000004 (stores: [])
      --> KSTREAM-SINK-0000000005
      <-- KSTREAM-AGGREGATE-0000000003
    Sink: KSTREAM-SINK-0000000005 (topic: counts)
      <-- KTABLE-TOSTREAM-0000000004

"""


def word_count() -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream("lines")
        .flat_map_values(str.split)
        .group_by(lambda k, w: w, Grouped.as_("words"))
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to("counts")
    )
    return builder


def test_describe_prints_kafka_streams_shape():
    assert str(word_count().build().describe()) == WORD_COUNT_DESCRIPTION


def test_internal_topics_get_the_application_id_prefix():
    internal = word_count().build().internal
    internal.application_id = "wc"
    assert internal.decorate("words-repartition") == "wc-words-repartition"
    assert internal.decorate("lines") == "lines"
    assert internal.changelog_topic("counts") == "wc-counts-changelog"


def test_key_change_without_stateful_operator_needs_no_repartition():
    builder = StreamsBuilder()
    builder.stream("in").select_key(lambda k, v: v).map_values(str.upper).to("out")
    assert len(builder.build().describe().subtopologies) == 1


def test_stateful_operator_after_merge_of_rekeyed_stream_repartitions():
    builder = StreamsBuilder()
    rekeyed = builder.stream("a").select_key(lambda k, v: v)
    rekeyed.merge(builder.stream("b")).group_by_key().count()
    plans = builder.build().internal.subtopologies()
    assert len(plans) == 2
    assert plans[1].source_topics[0].endswith("-repartition")


def test_tasks_per_subtopology_follow_the_largest_partition_count():
    internal = word_count().build().internal
    internal.application_id = "wc"
    assert internal.topic_partitions({"lines": 3}) == {"lines": 3, "words-repartition": 3}
    assert internal.task_ids({"lines": 3}) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_explicit_repartition_partitions_are_used():
    builder = StreamsBuilder()
    builder.stream("in").repartition(Repartitioned.as_("r").with_partitions(5)).to("out")
    internal = builder.build().internal
    assert internal.topic_partitions({"in": 2}) == {"in": 2, "r-repartition": 5}


def test_a_foreign_key_joins_topics_take_their_tables_partition_counts():
    """Each of the join's two sub-topologies reads the internal topic the other writes: counted as Kafka
    Streams counts them (the known source topics of the writer suffice), then co-partitioned with the
    table each one meets."""
    builder = StreamsBuilder()
    orders, customers = builder.table("orders"), builder.table("customers")
    orders.join(customers, lambda order: order, lambda order, customer: customer).to_stream().to("out")
    counts = builder.build().internal.topic_partitions({"orders": 4, "customers": 2})
    subscription, response = sorted(t for t in counts if t.startswith("KTABLE-FK-JOIN"))
    assert counts[subscription] == 2 and counts[response] == 4


def test_copartitioned_topics_with_different_counts_fail_clearly():
    builder = StreamsBuilder()
    builder.stream("left").merge(builder.stream("right")).to("out")
    internal = builder.build().internal
    internal.copartition(["left", "right"])
    assert internal.topic_partitions({"left": 4, "right": 4})["right"] == 4
    with pytest.raises(CoPartitioningError, match=r"\['left', 'right'\].*same number of partitions"):
        internal.topic_partitions({"left": 4, "right": 2})


def test_missing_source_topic_partition_count_is_reported():
    with pytest.raises(TopologyError, match="create the topic"):
        word_count().build().internal.topic_partitions({})


def test_named_operators_use_the_given_names():
    builder = StreamsBuilder()
    builder.stream("in").filter(lambda k, v: True, Named.as_("only-good")).to("out")
    names = [node.name for node in builder.build().describe().subtopologies[0].nodes]
    assert "only-good" in names


def test_store_names_must_be_unique():
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.group_by_key().count(materialized=Materialized.as_("same"))
    with pytest.raises(TopologyError, match="'same' already exists"):
        stream.group_by_key().count(materialized=Materialized.as_("same"))


def test_config_rejects_unknown_keys_with_a_hint():
    with pytest.raises(ConfigError, match=r"Did you mean 'commit\.interval\.ms'"):
        StreamsConfig({"application.id": "a", "commit.interval.msec": 5})


@pytest.mark.parametrize(
    "key, value",
    [
        ("processing.guarantee", "exactly_once"),
        ("commit.interval.ms", -1),
        ("statestore.cache.max.bytes", -1),
        ("application.id", "has space"),
    ],
)
def test_config_rejects_bad_values(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        StreamsConfig({"application.id": "a", key: value})


def test_config_defaults_and_aliases():
    with pytest.raises(ConfigError, match=r"application\.id"):
        StreamsConfig({})
    eos = StreamsConfig(
        {
            "application.id": "a",
            "processing.guarantee": "exactly_once_v2",
            "cache.max.bytes.buffering": 1024,
            "producer.linger.ms": 1,
        }
    )
    assert eos[("commit.interval.ms")] == 100
    assert eos["statestore.cache.max.bytes"] == 1024
    assert eos.client_props("producer.") == {"linger.ms": 1}
    assert StreamsConfig({"application.id": "a"})["commit.interval.ms"] == 30_000


def test_aggregating_merged_streams_requires_copartitioned_inputs():
    builder = StreamsBuilder()
    merged = builder.stream("left").merge(builder.stream("right"))
    merged.to("out")  # stateless use of a merge needs nothing
    assert builder.build().internal.topic_partitions({"left": 4, "right": 2}) == {"left": 4, "right": 2}
    merged.group_by_key().count()
    with pytest.raises(CoPartitioningError, match="same number of partitions"):
        builder.build().internal.topic_partitions({"left": 4, "right": 2})


def test_to_table_after_a_key_change_repartitions():
    builder = StreamsBuilder()
    builder.stream("in").select_key(lambda k, v: v).to_table()
    plans = builder.build().internal.subtopologies()
    assert len(plans) == 2 and plans[1].source_topics[0].endswith("-repartition")


def test_sources_keep_their_offset_reset_policy():
    topology = (Topology()
                .add_source("clicks", "clicks", offset_reset=AutoOffsetReset.LATEST)
                .add_source("logs", re.compile("logs-.*"), offset_reset=AutoOffsetReset.EARLIEST)
                .add_source("orders", "orders"))
    internal = topology.internal
    assert internal.offset_reset("clicks") is AutoOffsetReset.LATEST
    assert internal.offset_reset("logs-eu") is AutoOffsetReset.EARLIEST
    assert internal.offset_reset("orders") is None  # the auto.offset.reset config decides
    with pytest.raises(TopologyError, match=r"AutoOffsetReset\.EARLIEST or AutoOffsetReset\.LATEST"):
        Topology().add_source("s", "t", offset_reset="latest")
