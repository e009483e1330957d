"""Stream time survives a task reopen (without Spark): each commit carries the partition time as offset
metadata (Kafka Streams' format), and a task opened again from the committed offsets resumes it, so a
record too late for its window before the reopen is still dropped after it."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.kafka import clients
from strom.spark.runtime.parked import PARKED
from strom.spark.runtime.plan import create_internal_topics, plan_application
from strom.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder, TimeWindows, Topology
from strom.streams.config import StreamsConfig
from strom.streams.processor.internals.partition_group import decode_commit_metadata
from support.kafka import Record, produce

from .conftest import read_updates
from .task_batches import run_batch

pytestmark = [pytest.mark.broker]

S, L = Serdes.String(), Serdes.Long()


def windowed_counts(source: str, sink: str) -> Topology:
    """Counts per key and 10 s window, no grace: a window closes when stream time reaches its end."""
    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_(S, S)).group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10_000)).count(materialized=Materialized.as_("wcounts"))
        .to_stream().map(lambda windowed, count: (f"{windowed.key}@{windowed.window.start}", count))
        .to(sink, Produced.with_(S, L)))
    return builder.build()


def _produce(bootstrap: str, topic: str, records: list[tuple[str, int]]) -> None:
    produce(bootstrap, topic, [Record(key, "v", timestamp=timestamp) for key, timestamp in records])


def _committed_metadata(bootstrap: str, group: str, topic: str) -> tuple[int, str]:
    consumer = clients.consumer(bootstrap, group_id=group)
    try:
        [committed] = consumer.committed([KafkaTopicPartition(topic, 0)], 30)
    finally:
        consumer.close()
    return committed.offset, committed.metadata


@pytest.mark.parametrize("guarantee", ["exactly_once_v2", "at_least_once"])
def test_a_record_late_before_the_reopen_is_still_dropped_after_it(broker, topics, tmp_path, guarantee):
    bootstrap = broker.bootstrap_servers
    names = topics(source=1, sink=1)
    source = names["source"]
    config = StreamsConfig({"application.id": f"rt-time-{guarantee}-{source}", "bootstrap.servers": bootstrap,
                            "processing.guarantee": guarantee, "state.dir": str(tmp_path)})
    topology = windowed_counts(source, names["sink"])
    create_internal_topics(plan_application(topology, config, clients.admin(bootstrap)),
                           clients.admin(bootstrap), bootstrap)
    # stream time reaches 25 s: window [0 s, 10 s) closes; the record at 5 s comes after a reopen
    _produce(bootstrap, source, [("a", 1_000), ("a", 25_000), ("a", 5_000), ("a", 26_000)])

    first = run_batch(topology, config, bootstrap, source, 0, 2)
    assert (first.records, first.reused) == (2, False)
    offset, metadata = _committed_metadata(bootstrap, config.application_id, source)
    assert (offset, decode_commit_metadata(metadata)[0]) == (2, 25_000)

    PARKED.close_all()  # the worker went away: the next batch opens the task again
    second = run_batch(topology, config, bootstrap, source, 2, 4, run_id="after a restart")
    assert (second.records, second.reused) == (2, False)
    reopened = PARKED.take((config.application_id, "0_0"))
    assert reopened is not None
    try:
        assert reopened.task.stream_time == 26_000
        assert reopened.task.metrics.dropped_records == 1  # the record at 5 s: its window was closed
    finally:
        reopened.close()
    committed = _committed_metadata(bootstrap, config.application_id, source)[1]
    assert decode_commit_metadata(committed)[0] == 26_000
    assert read_updates(bootstrap, names["sink"]) == {"a@0": [1], "a@20000": [1, 2]}


def test_another_worker_resumes_the_committed_stream_time_without_local_state(broker, topics, tmp_path):
    """The time comes from the commit metadata: the reopening worker has its own state directory."""
    bootstrap = broker.bootstrap_servers
    names = topics(source=1, sink=1)
    source = names["source"]
    props = {"application.id": f"rt-time-fresh-{source}", "bootstrap.servers": bootstrap,
             "processing.guarantee": "exactly_once_v2"}
    topology = windowed_counts(source, names["sink"])
    config = StreamsConfig({**props, "state.dir": str(tmp_path / "one")})
    create_internal_topics(plan_application(topology, config, clients.admin(bootstrap)),
                           clients.admin(bootstrap), bootstrap)
    _produce(bootstrap, source, [("a", 40_000), ("b", 38_000)])
    run_batch(topology, config, bootstrap, source, 0, 2)
    PARKED.close_all()

    run_batch(topology, StreamsConfig({**props, "state.dir": str(tmp_path / "two")}), bootstrap, source, 2, 2,
              run_id="another worker")
    reopened = PARKED.take((config.application_id, "0_0"))
    assert reopened is not None
    try:
        assert reopened.task.stream_time == 40_000  # not the 38 s of the last record: the maximum
    finally:
        reopened.close()
