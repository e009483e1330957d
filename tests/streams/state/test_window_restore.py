"""Window and session stores of DSL aggregations restore from their changelogs (Kafka's layouts)."""

import pytest

from strom.kafka.serdes import Serdes
from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.options import Consumed, Materialized
from strom.streams.kstream.windows import SessionWindows, TimeWindows
from strom.streams.state.context import ChangelogRecord
from strom.streams.state.window import builders, schemas
from strom.streams.test_driver import TopologyTestDriver

PROPS = {"application.id": "restore", "default.key.serde": "String", "default.value.serde": "String"}
RECORDS = [("a", 1), ("b", 5), ("a", 12), ("a", 14), ("c", 30), ("b", 31), ("a", 33)]


def _topology(windowed, persistent):
    builder = StreamsBuilder()
    grouped = builder.stream("input", Consumed.with_(Serdes.String(), Serdes.String())).group_by_key()
    if windowed == "time":
        factory = builders.persistent_timestamped_window_store if persistent else \
            builders.in_memory_timestamped_window_store
        grouped.windowed_by(TimeWindows.of_size_and_grace(10, 100).advance_by(5)).count(
            materialized=Materialized.as_(factory("agg", 110, 10)))
    else:
        factory = builders.persistent_session_store if persistent else builders.in_memory_session_store
        grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 100)).count(
            materialized=Materialized.as_(factory("agg", 105)))
    return builder.build()


def _contents(store, windowed):
    if windowed == "time":
        return list(store.all())
    return list(store.find_sessions_key_range(None, None, 0, 10**6))


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("windowed", ["time", "session"])
def test_store_restores_from_changelog(windowed, persistent, tmp_path):
    topology = _topology(windowed, persistent)
    with TopologyTestDriver(topology, PROPS | {"state.dir": str(tmp_path / "a")}) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        for key, timestamp in RECORDS:
            topic.pipe_input(key, "v", timestamp)
        store = driver.get_state_store("agg")
        expected = _contents(store, windowed)
        changelog = driver.producer_records("restore-agg-changelog")
    assert expected and changelog
    if windowed == "time":
        key, start, seqnum = schemas.split_window_store_key(changelog[0][0])
        # key + window start + sequence number; the plain count, its timestamp as record timestamp
        assert (key, start, seqnum) == (b"a", 0, 0)
        assert changelog[0][1:] == ((1).to_bytes(8, "big"), 1)
    with TopologyTestDriver(topology, PROPS | {"state.dir": str(tmp_path / "b")}) as restored:
        manager = restored.tasks[0].context.state_manager
        applied = manager.restore("agg", [ChangelogRecord(k, v, offset, ts)
                                          for offset, (k, v, ts) in enumerate(changelog)])
        assert applied == len(changelog)
        store = restored.get_state_store("agg")
        assert _contents(store, windowed) == expected
