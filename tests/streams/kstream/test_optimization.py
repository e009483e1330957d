"""topology.optimization (StreamsBuilder.build(props)): each rule against the unoptimized topology's results
through the TopologyTestDriver, and the optimized topology as describe() shows it."""

from __future__ import annotations

import pytest

from strom.errors import ConfigError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    Grouped,
    JoinWindows,
    Materialized,
    Produced,
    StreamsBuilder,
    TopologyTestDriver,
)

S = Serdes.String()
L = Serdes.Long()
TABLE_INPUT = [("a", "1"), ("b", "2"), ("a", "3"), (None, "x"), ("b", None), ("c", "4")]
WORDS = [("k1", "apple"), ("k2", "avocado"), ("k3", "banana"), ("k1", "blueberry"), ("k4", "cherry")]


def _optimized(props: dict, optimization: str = "all") -> dict:
    """The props with ``optimization``, and a state directory of their own (a driver given one keeps its
    stores there, so a second run would start from the first one's)."""
    return {**props, "topology.optimization": optimization, "state.dir": f"{props['state.dir']}-optimized"}


def _table_app(props: dict, build_props: dict) -> tuple[list, dict, set[str]]:
    builder = StreamsBuilder()
    table = builder.table("in", Consumed.with_(S, S), Materialized.as_("latest"))
    table.to_stream().to("out", Produced.with_(S, S))
    stream = builder.stream("orders", Consumed.with_(S, S))
    stream.join(table, lambda order, latest: f"{order}/{latest}").to("joined", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(build_props), props) as driver:
        source = driver.create_input_topic("in", S, S)
        orders = driver.create_input_topic("orders", S, S)
        for key, value in TABLE_INPUT:
            source.pipe_input(key, value)
            orders.pipe_input("a", "order")
        outputs = [driver.create_output_topic(t, S, S).read_key_values_to_list() for t in ("out", "joined")]
        return outputs, dict(driver.get_key_value_store("latest").all()), driver.produced_topic_names()


def test_reuse_ktable_source_topics_writes_no_changelog_and_gives_the_same_results(props):
    plain = _table_app(props, props)
    optimized = _table_app(*[_optimized(props, "reuse.ktable.source.topics")] * 2)
    assert optimized[:2] == plain[:2]
    assert plain[1] == {"a": "3", "c": "4"}
    assert "app-latest-changelog" in plain[2]
    assert "app-latest-changelog" not in optimized[2]


def test_reuse_makes_the_source_topic_the_changelog_of_the_table_store(props):
    builder = StreamsBuilder()
    builder.table("in", Consumed.with_(S, S), Materialized.as_("latest"))
    builder.table("other", Consumed.with_(S, S))  # not materialized: no store, nothing to reuse
    internal = builder.build(_optimized(props)).internal
    assert internal.source_changelogs == {"latest": "in"}
    assert internal.store_builders["latest"].logging_enabled is False


def test_without_optimization_the_table_keeps_its_changelog(props):
    builder = StreamsBuilder()
    builder.table("in", Consumed.with_(S, S), Materialized.as_("latest"))
    internal = builder.build(props).internal
    assert internal.source_changelogs == {}
    assert internal.store_builders["latest"].logging_enabled is True


def _rekeyed_counts(build_props: dict, props: dict) -> tuple[StreamsBuilder, list, dict, dict]:
    """A re-keyed (and filtered) stream grouped twice: a count and a reduce."""
    builder = StreamsBuilder()
    rekeyed = (builder.stream("in", Consumed.with_(S, S))
               .select_key(lambda key, value: value[0])
               .filter(lambda key, value: value != "avocado"))
    counts = rekeyed.group_by_key(Grouped.with_(S, S)).count(Materialized.as_("counts"))
    counts.to_stream().to("counts-out", Produced.with_(S, L))
    rekeyed.group_by_key(Grouped.with_(S, S)).reduce(lambda a, b: f"{a}+{b}",
                                                     Materialized.as_("joined-words"))
    topology = builder.build(build_props)
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        for key, value in WORDS:
            source.pipe_input(key, value)
        out = driver.create_output_topic("counts-out", S, L).read_key_values_to_list()
        return (topology, out, dict(driver.get_key_value_store("counts").all()),
                dict(driver.get_key_value_store("joined-words").all()))


def test_merge_repartition_topics_writes_one_topic_and_gives_the_same_results(props):
    plain = _rekeyed_counts(props, props)
    optimized = _rekeyed_counts(*[_optimized(props, "merge.repartition.topics")] * 2)
    assert optimized[1:] == plain[1:]
    assert plain[2] == {"a": 1, "b": 2, "c": 1}
    assert plain[3] == {"a": "apple", "b": "banana+blueberry", "c": "cherry"}
    assert len(plain[0].internal.internal_topics) == 2
    assert list(optimized[0].internal.internal_topics) == ["counts-repartition"]


def test_describe_shows_the_merged_repartition_topic_right_after_the_key_change(props):
    builder = StreamsBuilder()
    rekeyed = builder.stream("in").select_key(lambda key, value: value).filter(lambda key, value: True)
    rekeyed.group_by_key().count(Materialized.as_("c1"))
    rekeyed.group_by_key().count(Materialized.as_("c2"))
    assert str(builder.build(_optimized(props)).describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [in])\n"
        "      --> KSTREAM-KEY-SELECT-0000000001\n"
        "    Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])\n"
        "      --> c1-repartition-filter\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: c1-repartition-filter (stores: [])\n"
        "      --> c1-repartition-sink\n"
        "      <-- KSTREAM-KEY-SELECT-0000000001\n"
        "    Sink: c1-repartition-sink (topic: c1-repartition)\n"
        "      <-- c1-repartition-filter\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: c1-repartition-source (topics: [c1-repartition])\n"
        "      --> KSTREAM-FILTER-0000000002\n"
        "    Processor: KSTREAM-FILTER-0000000002 (stores: [])\n"
        "      --> KSTREAM-AGGREGATE-0000000003, KSTREAM-AGGREGATE-0000000004\n"
        "      <-- c1-repartition-source\n"
        "    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [c1])\n"
        "      --> none\n"
        "      <-- KSTREAM-FILTER-0000000002\n"
        "    Processor: KSTREAM-AGGREGATE-0000000004 (stores: [c2])\n"
        "      --> none\n"
        "      <-- KSTREAM-FILTER-0000000002\n"
        "\n"
    )


def _rekeyed_join_and_count(build_props: dict, props: dict) -> tuple[StreamsBuilder, list, dict]:
    builder = StreamsBuilder()
    left = builder.stream("in", Consumed.with_(S, S)).map(lambda key, value: (value[0], value))
    right = builder.stream("other", Consumed.with_(S, S))
    left.join(right, lambda a, b: f"{a}&{b}", JoinWindows.of_time_difference_with_no_grace(1000)).to(
        "joined", Produced.with_(S, S))
    left.group_by_key(Grouped.with_(S, S)).count(Materialized.as_("counts"))
    topology = builder.build(build_props)
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        other = driver.create_input_topic("other", S, S)
        for key, value in WORDS:
            source.pipe_input(key, value)
            other.pipe_input(value[0], "x")
        joined = driver.create_output_topic("joined", S, S).read_key_values_to_list()
        return topology, joined, dict(driver.get_key_value_store("counts").all())


def test_a_join_and_an_aggregation_after_one_key_change_share_its_repartition_topic(props):
    plain = _rekeyed_join_and_count(props, props)
    optimized = _rekeyed_join_and_count(*[_optimized(props)] * 2)
    assert optimized[1:] == plain[1:]
    assert plain[2] == {"a": 2, "b": 2, "c": 1} and len(plain[1]) > 0
    assert len(plain[0].internal.internal_topics) == 2
    assert len(optimized[0].internal.internal_topics) == 1


def test_a_value_change_between_key_change_and_grouping_keeps_the_topics_apart(props):
    """As Kafka's getKeyChangingParentNode: a map_values on the way stops the merge (its values are
    what the repartition topic carries)."""
    builder = StreamsBuilder()
    rekeyed = builder.stream("in").select_key(lambda key, value: value)
    rekeyed.map_values(len).group_by_key(Grouped.with_(S, L)).count(Materialized.as_("c1"))
    rekeyed.group_by_key().count(Materialized.as_("c2"))
    internal = builder.build(_optimized(props)).internal
    assert sorted(internal.internal_topics) == ["c1-repartition", "c2-repartition"]
    assert internal.nodes["c1-repartition-filter"].predecessors == ["KSTREAM-MAPVALUES-0000000002"]


def test_an_explicit_repartition_is_not_merged(props):
    builder = StreamsBuilder()
    rekeyed = builder.stream("in").select_key(lambda key, value: value)
    rekeyed.repartition().group_by_key().count(Materialized.as_("c1"))
    rekeyed.group_by_key().count(Materialized.as_("c2"))
    internal = builder.build(_optimized(props)).internal
    assert len(internal.internal_topics) == 2


@pytest.mark.parametrize("value", ["none", "all", "reuse.ktable.source.topics, merge.repartition.topics",
                                   "single.store.self.join"])
def test_optimization_values_of_kafka_are_accepted(props, value):
    StreamsBuilder().build(_optimized(props, value))


@pytest.mark.parametrize("value", ["everything", "all,none", "merge.repartition.topics,bogus"])
def test_an_unknown_optimization_is_refused(props, value):
    with pytest.raises(ConfigError, match=r"topology\.optimization"):
        StreamsBuilder().build(_optimized(props, value))
