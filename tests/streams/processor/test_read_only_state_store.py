"""Topology.add_read_only_state_store (KIP-813) through the TopologyTestDriver: a task store filled from its
source topic by its processor, read by another processor of the sub-topology, never logged."""

from __future__ import annotations

import pytest

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import TopologyTestDriver
from strom.streams.processor import AutoOffsetReset, Processor, Record, Topology
from strom.streams.state import Stores

S = Serdes.String()


class Updater(Processor):
    def init(self, context):
        self.store = context.get_state_store("ref")

    def process(self, record: Record) -> None:
        self.store.put(record.key, record.value)


class Lookup(Processor):
    def init(self, context):
        self.context = context
        self.store = context.get_state_store("ref")

    def process(self, record: Record) -> None:
        self.context.forward(record.with_value(f"{record.value}:{self.store.get(record.key)}"))


def _topology() -> Topology:
    topology = Topology()
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("ref"), S, S)
    topology.add_read_only_state_store(store, "ref-source", None, S.deserializer(), S, "ref", "ref-updater",
                                       Updater)
    topology.add_source("events-source", "events", key_serde=S, value_serde=S)
    topology.add_processor("lookup", Lookup, "events-source")
    topology.connect_processor_and_state_stores("lookup", "ref")
    topology.add_sink("out", "out", "lookup", key_serde=S, value_serde=S)
    return topology


def test_the_processor_keeps_the_store_up_to_date_and_others_read_it(props):
    topology = _topology()
    with TopologyTestDriver(topology, props) as driver:
        ref = driver.create_input_topic("ref", S, S)
        events = driver.create_input_topic("events", S, S)
        ref.pipe_input("a", "1")
        events.pipe_input("a", "x")
        ref.pipe_input("a", "2")
        ref.pipe_input("b", "3")
        events.pipe_input("a", "y")
        events.pipe_input("b", "z")
        events.pipe_input("c", "w")
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("a", "x:1"), ("a", "y:2"), ("b", "z:3"), ("c", "w:None")]
        assert dict(driver.get_key_value_store("ref").all()) == {"a": "2", "b": "3"}
        assert not any(topic.endswith("-changelog") for topic in driver.produced_topic_names())


def test_the_store_has_its_source_topic_as_changelog(props):
    internal = _topology().internal
    assert internal.source_changelogs == {"ref": "ref"}
    assert internal.store_builders["ref"].logging_enabled is False
    assert internal.offset_reset("ref") is AutoOffsetReset.EARLIEST
    assert "Processor: ref-updater (stores: [ref])" in str(_topology().describe())


def test_names_already_used_are_refused():
    topology = _topology()
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("other"), S, S)
    with pytest.raises(TopologyError, match="already"):
        topology.add_read_only_state_store(store, "ref-source", None, S, S, "ref2", "p2", Updater)
