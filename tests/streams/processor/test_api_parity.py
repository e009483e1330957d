"""Kafka Streams API parity: TestInputTopic's pipeInput overloads and list pipes, Stores' window, session
and LRU factories (as Kafka's javadoc describes them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from strom.kafka.serdes import Serdes
from strom.streams import Processor, Record, Stores, StreamsBuilder, Topology, TopologyTestDriver
from strom.streams.test_driver import TestRecord

S, L = Serdes.String(), Serdes.Long()


def _passthrough() -> Topology:
    builder = StreamsBuilder()
    builder.stream("in").to("out")
    return builder.build()


def test_pipe_input_overloads_as_kafkas(props):
    with TopologyTestDriver(_passthrough(), props) as driver:
        source = driver.create_input_topic("in", S, S, start_timestamp_ms=100, auto_advance_ms=10)
        out = driver.create_output_topic("out", S, S)
        source.pipe_input("only-a-value")                                  # pipeInput(V)
        source.pipe_input("k", "v")                                        # pipeInput(K, V)
        at = datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC)
        source.pipe_input("v-at", timestamp=at)                           # pipeInput(V, Instant)
        source.pipe_input("k", "v-ms", 7)                                  # pipeInput(K, V, long)
        source.pipe_input(TestRecord("rk", "rv", 9, (("h", b"1"),)))       # pipeInput(TestRecord)
        records = out.read_records_to_list()
        with pytest.raises(TypeError, match="positional"):
            source.pipe_input("a", "b", 1, (), "extra")
    assert [(r.key, r.value, r.timestamp) for r in records] == [
        (None, "only-a-value", 100), ("k", "v", 110), (None, "v-at", 5000), ("k", "v-ms", 7), ("rk", "rv", 9)]
    assert records[-1].headers == (("h", b"1"),)


def test_list_pipes_and_their_timestamp_advancing_overloads(props):
    with TopologyTestDriver(_passthrough(), props) as driver:
        source = driver.create_input_topic("in", S, S, start_timestamp_ms=1_000, auto_advance_ms=1)
        out = driver.create_output_topic("out", S, S)
        source.pipe_key_value_list([("a", "1"), ("b", "2")])
        source.pipe_value_list(["3"])
        source.pipe_key_value_list([("c", "4"), ("d", "5")], datetime(1970, 1, 1, 0, 1, tzinfo=UTC),
                                   timedelta(seconds=1))
        source.pipe_value_list(["6", "7"], 500, 5)
        source.pipe_record_list([TestRecord("e", "8", 42), ("f", "9")])
        source.pipe_input("10")  # the advancing overloads left the topic's time where it was
        with pytest.raises(TypeError, match="both"):
            source.pipe_value_list(["x"], 5)
        got = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
    assert got == [("a", "1", 1_000), ("b", "2", 1_001), (None, "3", 1_002), ("c", "4", 60_000),
                   ("d", "5", 61_000), (None, "6", 500), (None, "7", 505), ("e", "8", 42), ("f", "9", 1_003),
                   (None, "10", 1_004)]


class WindowWriter(Processor):
    def init(self, context):
        self.windows = context.get_state_store("windows")
        self.sessions = context.get_state_store("sessions")

    def process(self, record: Record) -> None:
        self.windows.put(record.key, len(record.value), record.timestamp - record.timestamp % 100)


@pytest.mark.parametrize("window_supplier, session_supplier", [
    (Stores.persistent_window_store, Stores.persistent_session_store),
    (Stores.in_memory_window_store, Stores.in_memory_session_store),
])
def test_stores_window_and_session_factories_build_usable_stores(props, window_supplier, session_supplier):
    windows = Stores.window_store_builder(window_supplier("windows", timedelta(seconds=10), 100, False), S, L)
    sessions = Stores.session_store_builder(session_supplier("sessions", timedelta(seconds=10)), S, L)
    topology = (Topology().add_source("src", "in", key_serde=S, value_serde=S)
                .add_processor("write", WindowWriter, "src")
                .add_state_store(windows, "write").add_state_store(sessions, "write"))
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "abc", 150)
        source.pipe_input("k", "abcdef", 260)
        store = driver.get_window_store("windows")
        assert list(store.fetch_range("k", 0, 1_000)) == [(100, 3), (200, 6)]
        assert driver.get_session_store("sessions") is not None
    supplier = Stores.persistent_timestamped_window_store("ts", 1_000, 100)
    assert supplier.timestamped and supplier.persistent


class LastSeen(Processor):
    def init(self, context):
        self.store = context.get_state_store("recent")

    def process(self, record: Record) -> None:
        if record.value == "read":
            self.store.get(record.key)
        else:
            self.store.put(record.key, len(record.value))


def test_lru_map_keeps_the_most_recently_used_keys_and_deletes_the_evicted_in_its_changelog(props):
    recent = Stores.key_value_store_builder(Stores.lru_map("recent", 2), S, L)
    topology = (Topology().add_source("src", "in", key_serde=S, value_serde=S)
                .add_processor("remember", LastSeen, "src").add_state_store(recent, "remember"))
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        for key, value in [("a", "x"), ("b", "xx"), ("a", "read"), ("c", "xxx")]:  # b is the eldest at c
            source.pipe_input(key, value)
        assert dict(driver.get_key_value_store("recent").all()) == {"a": 1, "c": 3}
        changelog = [(k, None if v is None else L.deserialize("t", v))
                     for k, v, _ in driver.producer_records("app-recent-changelog")]
    assert changelog == [(b"a", 1), (b"b", 2), (b"c", 3), (b"b", None)]
    with pytest.raises(Exception, match="max_cache_size"):
        Stores.lru_map("bad", 0)


class ConfigReader(Processor):
    seen: dict = {}

    def init(self, context):
        ConfigReader.seen = {"configs": context.app_configs(),
                             "consumer": context.app_configs_with_prefix("consumer."),
                             "key": context.key_serde(), "value": context.value_serde()}

    def process(self, record: Record) -> None:
        pass


def test_processor_context_serdes_and_app_configs_as_kafkas(props):
    topology = (Topology().add_source("src", "in", key_serde=S, value_serde=S)
                .add_processor("read", ConfigReader, "src"))
    with TopologyTestDriver(topology, {**props, "default.value.serde": "Long",
                                       "consumer.max.poll.records": 10}):
        pass
    seen = ConfigReader.seen
    assert seen["configs"]["application.id"] == "app" and seen["configs"]["commit.interval.ms"] == 30_000
    assert seen["consumer"] == {"max.poll.records": 10}
    assert isinstance(seen["key"], type(S)) and isinstance(seen["value"], type(L))
