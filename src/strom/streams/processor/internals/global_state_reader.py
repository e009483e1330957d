"""Keeps GlobalStateStores up to date from Kafka: every partition of every global topic is read from
where this instance is (the beginning at start: that is the restore) to its current end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.errors import BrokerUnavailableError, UnknownTopicError
from strom.streams.processor.internals.global_state import GlobalStateStores

TIMEOUT_S = 10.0
BATCH = 1_000
POLL_S = 0.1
"""consume() waits this long for a full batch; short, as a partition's end comes as an EOF event."""


def catch_up(state: GlobalStateStores, consumer: Any) -> int:
    """Apply every record of the global topics not applied yet; returns how many were applied.

    ``consumer`` is a confluent-kafka consumer from ``strom.kafka.clients.consumer`` with
    ``enable.partition.eof`` on (its group is not used: partitions are assigned by hand, offsets live
    in ``state.offsets``).
    """
    applied = 0
    try:
        for topic in state.topics:
            for partition in _partitions(consumer, topic):
                applied += _catch_up_partition(state, consumer, topic, partition)
    finally:
        consumer.unassign()
    return applied


def _partitions(consumer: Any, topic: str) -> list[int]:
    try:
        metadata = consumer.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
    except Exception as exc:
        raise BrokerUnavailableError(f"Could not read metadata of global table topic {topic!r}: {exc}. "
                                     "Check that the broker is running.") from exc
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise UnknownTopicError(f"Global table topic {topic!r} does not exist; create it before starting "
                                "the application.")
    return sorted(metadata.partitions)


def _catch_up_partition(state: GlobalStateStores, consumer: Any, topic: str, partition: int) -> int:
    low, high = consumer.get_watermark_offsets(KafkaTopicPartition(topic, partition), TIMEOUT_S, cached=False)
    start = state.offsets.get((topic, partition))
    if high <= (low if start is None else start):
        return 0
    consumer.assign([KafkaTopicPartition(topic, partition, OFFSET_BEGINNING if start is None else start)])
    records: list[tuple[int, int, int, bytes | None, bytes | None]] = []
    last_progress = time.monotonic()
    while True:
        messages = consumer.consume(BATCH, POLL_S)
        if messages:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > 3 * TIMEOUT_S:
            raise BrokerUnavailableError(f"Reading global table topic {topic}-{partition} made no progress "
                                         f"for {3 * TIMEOUT_S:.0f}s; check the broker.")
        for message in messages:
            error = message.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise BrokerUnavailableError(f"Reading global table topic {topic}-{partition} failed: "
                                             f"{error.str()}.")
            if error is None:
                records.append((partition, message.offset(), message.timestamp()[1], message.key(),
                                message.value()))
        if (records and records[-1][1] + 1 >= high) or any(m.error() is not None for m in messages):
            break
    return state.apply(topic, records) if records else 0


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
