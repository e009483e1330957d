"""Brings a task's stores up to the end of their changelogs (read_committed) before it processes.

Each store knows the changelog offset its local data reached (its checkpoint); only the records
after it are replayed. Under exactly-once the task's producer has already called
``init_transactions``, so no transaction of this task is open and the log end is stable.

A store whose changelog is one of the task's source topics (a source KTable under
``topology.optimization``, a read-only state store) is restored only up to the task's committed
offset of that partition, as Kafka Streams' StoreChangelogReader does: the records after it are
processed again, so they must not be in the store yet.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from strom.kafka.reading import end_offset, read_to_end
from strom.streams.processor.internals.task import StreamTask

__all__ = ["restore_task"]


def restore_task(task: StreamTask, consumer: Consumer, stores: Collection[str] | None = None,
                 log_ends: dict[str, int] | None = None,
                 committed: Mapping[tuple[str, int], int] | None = None) -> int:
    """Replays the changelog tail of every logged store (or of those named in ``stores``) into
    it; returns the number of records applied.

    ``consumer`` must read committed data with ``enable.partition.eof`` on. ``log_ends`` (store
    -> its changelog's end when last read to it, kept by the caller across calls) skips a
    changelog that has not grown since: under exactly-once its end lies past the last record
    (the commit marker), so the offset alone would read it again each time. ``committed`` holds
    the group's committed offsets of the task's source partitions (none: 0), the end of a
    restore from a source topic.
    """
    restored = 0
    ends = {} if log_ends is None else log_ends
    offsets = task.restore_offsets()
    sourced = task.source_changelog_partitions()
    for store, tp in task.changelog_partitions().items():
        if stores is not None and store not in stores:
            continue
        start = offsets[store]
        high = end_offset(consumer, tp.topic, tp.partition)
        if store in sourced:
            high = min(high, (committed or {}).get((tp.topic, tp.partition), 0))
        if not ((start is not None and start >= high) or ends.get(store) == high):
            changelog = TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING if start is None else start)
            records = (_source_records(consumer, changelog, high) if store in sourced
                       else _records(consumer, changelog))
            restored += task.restore(store, records)
        ends[store] = high
    return restored


def _records(consumer: Consumer, changelog: TopicPartition) -> Iterator[tuple]:
    for message in read_to_end(consumer, [changelog], f"changelog {changelog.topic}-{changelog.partition}"):
        yield message.key(), message.value(), message.offset(), message.timestamp()[1]


def _source_records(consumer: Consumer, source: TopicPartition, end: int) -> Iterator[tuple]:
    """A source topic's records below ``end`` that have a key (a table source drops null keys)."""
    for message in read_to_end(consumer, [source], f"source topic {source.topic}-{source.partition}"):
        offset = message.offset()
        if offset >= end:
            return
        if message.key() is not None:
            yield message.key(), message.value(), offset, message.timestamp()[1]
        if offset + 1 >= end:
            return
