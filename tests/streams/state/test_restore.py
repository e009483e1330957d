"""Restoring a task's stores from their changelog reproduces them exactly, as a runtime does after a task
moves: read the changelog partition from the store's checkpointed offset and replay it."""

from __future__ import annotations

import pytest

from strom.kafka.serdes import Serdes
from strom.streams import Materialized, Stores, StreamsBuilder, StreamsConfig, TopologyTestDriver
from strom.streams.processor import TaskId, TopicPartition
from strom.streams.processor.internals.task import StreamTask
from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import ChangelogRecord

S = Serdes.String()


def topology(supplier):
    builder = StreamsBuilder()
    builder.table("t", materialized=Materialized.as_(supplier))
    return builder.build()


def changelog(driver: TopologyTestDriver, topic: str) -> list[ChangelogRecord]:
    return [
        ChangelogRecord(key, value, offset, ts)
        for offset, (key, value, ts) in enumerate(driver.producer_records(topic))
    ]


class NoSink:
    def send(self, *args):
        raise AssertionError("restoring must not produce records")

    def flush(self, collector):
        pass


def fresh_task(topo, state_dir) -> StreamTask:
    config = StreamsConfig(
        {
            "application.id": "app",
            "state.dir": str(state_dir),
            "default.key.serde": "String",
            "default.value.serde": "String",
        }
    )
    task = StreamTask(TaskId(0, 0), topo.internal, config, NoSink(), ThreadCache(1 << 20))
    task.initialize()
    return task


@pytest.mark.parametrize("supplier", [Stores.in_memory_key_value_store, Stores.persistent_key_value_store])
def test_restore_from_changelog_reproduces_the_store(props, tmp_path, supplier):
    with TopologyTestDriver(topology(supplier("users")), props) as driver:
        source = driver.create_input_topic("t", S, S)
        for i in range(50):
            source.pipe_input(f"user-{i % 17}", f"v{i}", timestamp=1000 + i)
        source.pipe_input("user-3", None)
        original = dict(driver.get_timestamped_key_value_store("users").all())
        records = changelog(driver, "app-users-changelog")
    assert len(original) == 16

    task = fresh_task(topology(supplier("users")), tmp_path / "elsewhere")
    assert task.changelog_partitions() == {"users": TopicPartition("app-users-changelog", 0)}
    assert task.restore_offsets() == {"users": None}
    assert task.restore("users", records) == len(records)
    task.complete_restoration()
    restored = dict(task.context.stores["users"].all())
    assert restored == original  # values and timestamps
    task.close()


def test_persistent_store_resumes_restore_from_its_checkpoint(props, tmp_path):
    state_dir = tmp_path / "state2"
    records = [ChangelogRecord(f"k{i}".encode(), f"v{i}".encode(), i, 100 + i) for i in range(10)]
    task = fresh_task(topology(Stores.persistent_key_value_store("users")), state_dir)
    task.restore("users", records[:6])
    task.close()

    task = fresh_task(topology(Stores.persistent_key_value_store("users")), state_dir)
    assert task.restore_offsets() == {"users": 6}
    task.restore("users", records[6:])
    task.complete_restoration()
    restored = {k: (v.value, v.timestamp) for k, v in task.context.stores["users"].all()}
    assert restored == {f"k{i}": (f"v{i}", 100 + i) for i in range(10)}
    task.close()
