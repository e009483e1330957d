"""Keeps GlobalStateStores up to date from Kafka: every partition of every global topic is read from
where this instance is (the beginning at start: that is the restore) to its current end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.kafka.reading import end_offset, partitions_of, read_batches
from strom.streams.processor.internals.global_state import GlobalStateStores

TIMEOUT_S = 10.0


def catch_up(state: GlobalStateStores, consumer: Any) -> int:
    """Apply every record of the global topics not applied yet; returns how many were applied.

    ``consumer`` is a confluent-kafka consumer from ``strom.kafka.reading.end_consumer`` (its group is
    not used: partitions are assigned by hand, offsets live in ``state.offsets``).
    """
    applied = 0
    for topic in state.topics:
        for partition in partitions_of(consumer, topic, TIMEOUT_S, kind="Global table topic"):
            applied += _catch_up_partition(state, consumer, topic, partition)
    return applied


def _catch_up_partition(state: GlobalStateStores, consumer: Any, topic: str, partition: int) -> int:
    start = state.offsets.get((topic, partition))
    if start is not None and end_offset(consumer, topic, partition, TIMEOUT_S) <= start:
        return 0  # nothing appended since
    begin = KafkaTopicPartition(topic, partition, OFFSET_BEGINNING if start is None else start)
    applied = 0
    # each fetch applied and committed on its own: the store's uncommitted buffer never holds more
    for batch in read_batches(consumer, [begin], f"global table topic {topic}-{partition}", 3 * TIMEOUT_S):
        applied += state.apply_fetch(topic, partition, batch)
    return applied


_PROCESS_STATE: dict[tuple[str, str], GlobalStateStores] = {}


def shared_global_stores(builder: Any, config: Any, state_dir: Path, consumer: Any) -> dict[str, Any]:
    """The global stores of ``builder``'s topology for this process, caught up with their topics.

    A runtime that creates a task per run (as each Spark micro-batch does) calls this before
    initializing the task and sets ``task.context.global_stores`` to the result: the first call in a
    process builds and restores the stores from the whole topics, later calls read only what was
    appended since.
    """
    if not builder.global_stores:
        return {}
    key = (config.application_id, str(state_dir))
    state = _PROCESS_STATE.get(key)
    if state is None:
        state = _PROCESS_STATE[key] = GlobalStateStores(builder.global_stores, config, state_dir)
    catch_up(state, consumer)
    return state.stores
