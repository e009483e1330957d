"""CompactionProcessor (Decaton's): tasks of one key within the linger time reach the next processor as one,
the compactor choosing which; dropped tasks complete, so every offset is committed; keyless tasks pass."""

from __future__ import annotations

import threading

import pytest

from strom.errors import ConfigError
from strom.tasks import CompactChoice, CompactionProcessor, ProcessorsBuilder, SubscriptionBuilder
from support.kafka import committed_offsets, create_topic, end_offsets, produce, unique, wait_for

pytestmark = pytest.mark.broker


def latest(held, new) -> CompactChoice:
    return CompactChoice.PICK_RIGHT if new.task > held.task else CompactChoice.PICK_LEFT


def test_each_key_reaches_the_worker_once_per_linger_with_the_compactors_choice(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1)  # (a partition left empty would never get a committed offset)
    records = [(f"user{i % 3}".encode(), str(i).encode()) for i in range(30)]
    records += [(None, b"100"), (None, b"101")]
    n = produce(bootstrap, topic, records)
    reached: list[tuple[bytes | None, int]] = []
    lock = threading.Lock()

    def worker(context, task: int) -> None:
        with lock:
            reached.append((context.key(), task))

    group = unique("compaction")
    pipeline = (ProcessorsBuilder.consuming(topic, int)
                .then_process(CompactionProcessor(2000, latest)).then_process(worker))
    with (SubscriptionBuilder.new_builder(group).processors_builder(pipeline)
          .properties({"decaton.commit.interval.ms": 100, "decaton.deferred.complete.timeout.ms": 10_000})
          .consumer_config({"bootstrap.servers": bootstrap}).build_and_start()) as sub:
        assert wait_for(lambda: len(reached) >= 5, 20)
        ends = end_offsets(bootstrap, topic, 1)
        assert wait_for(lambda: committed_offsets(bootstrap, group, topic, 1) == ends, 20, 0.1), (
            committed_offsets(bootstrap, group, topic, 1), ends, sub.metrics())
    assert sorted(reached, key=repr) == sorted(
        [(b"user0", 27), (b"user1", 28), (b"user2", 29), (None, 100), (None, 101)], key=repr)
    assert sum(ends.values()) == n


def test_linger_and_compactor_are_checked():
    with pytest.raises(ConfigError, match="positive whole number of milliseconds"):
        CompactionProcessor(0, latest)
    with pytest.raises(ConfigError, match="compactor"):
        CompactionProcessor(100, "latest")
