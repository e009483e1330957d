"""KTable.transform_values: a per-task ValueTransformerWithKey with state stores, as in Kafka Streams."""

from __future__ import annotations

import pytest

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    Materialized,
    Named,
    Produced,
    Stores,
    StreamsBuilder,
    TopologyTestDriver,
    ValueTransformerWithKey,
)

S, L = Serdes.String(), Serdes.Long()


class Versioned(ValueTransformerWithKey):
    """Appends how many updates its key has had, counted in a store; None (a deletion) stays None."""

    def init(self, context):
        super().init(context)
        self.updates = context.get_state_store("updates")

    def transform(self, key, value):
        if value is None:
            return None
        count = (self.updates.get(key) or 0) + 1
        self.updates.put(key, count)
        return f"{value}#{count}"


def versioned_table(builder: StreamsBuilder, **options):
    builder.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("updates"), S, L))
    return builder.table("t", Consumed.with_(S, S)).transform_values(Versioned, "updates", **options)


def test_transformer_uses_its_store_and_passes_deletions(props):
    builder = StreamsBuilder()
    versioned_table(builder).to_stream().to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        table = driver.create_input_topic("t", S, S)
        table.pipe_input("a", "x")
        table.pipe_input("a", "y")
        table.pipe_input("b", "z")
        table.pipe_input("a", None)
        out = driver.create_output_topic("out", S, S).read_key_values_to_list()
        assert out == [("a", "x#1"), ("a", "y#2"), ("b", "z#1"), ("a", None)]
        assert dict(driver.get_key_value_store("updates").all()) == {"a": 2, "b": 1}


def test_materialized_result_is_queryable_and_deleted_by_a_none_result(props):
    builder = StreamsBuilder()
    table = versioned_table(builder, named=Named.as_("versioned"), materialized=Materialized.as_("latest"))
    assert table.queryable_store_name == "latest"
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("t", S, S)
        source.pipe_input("a", "x")
        source.pipe_input("b", "y")
        source.pipe_input("b", None)
        assert dict(driver.get_key_value_store("latest").all()) == {"a": "x#1"}
    description = str(builder.build().describe())
    assert "Processor: versioned (stores: [latest, updates])" in description


def test_group_by_after_transform_values_subtracts_old_values(props):
    builder = StreamsBuilder()
    (
        builder.table("t", Consumed.with_(S, S))
        .transform_values(Upper)
        .group_by(lambda key, value: (value, key))
        .count(Materialized.as_("per-value"))
    )
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("t", S, S)
        source.pipe_input("k1", "a")
        source.pipe_input("k2", "a")
        source.pipe_input("k1", "b")
        assert dict(driver.get_key_value_store("per-value").all()) == {"A": 1, "B": 1}


class Upper(ValueTransformerWithKey):
    def transform(self, key, value):
        return None if value is None else value.upper()


def test_a_transformer_instance_instead_of_a_supplier_is_refused():
    table = StreamsBuilder().table("t")
    with pytest.raises(TopologyError, match="new transformer per task"):
        table.transform_values(Upper())


def test_a_join_reading_the_unmaterialized_result_runs_the_transformer_in_a_substitute_context(props):
    """As Kafka's getter: the table row's timestamp, no topic, no headers; not the stream record's."""

    class Context(ValueTransformerWithKey):
        def transform(self, key, value):
            metadata = self.context.record_metadata()
            return f"{value}|{metadata and metadata.topic}|{list(self.context.headers())}"

    builder = StreamsBuilder()
    table = builder.table("t", Consumed.with_(S, S)).transform_values(Context)
    builder.stream("s", Consumed.with_(S, S)).join(table, lambda left, right: f"{left}+{right}").to(
        "out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("t", S, S).pipe_input("k", "v", 1, headers=[("h", b"table")])
        driver.create_input_topic("s", S, S).pipe_input("k", "x", 2, headers=[("h", b"stream")])
        out = driver.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.value, r.timestamp) for r in out] == [("x+v|None|[]", 2)]
