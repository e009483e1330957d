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

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from strom.kafka.reading import end_offset, read_batches
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
            batches = (_source_batches(consumer, changelog, high) if store in sourced
                       else _batches(consumer, changelog))
            restored += task.state_manager.restore_batches(store, batches)
        ends[store] = high
    return restored


class _Fetched:
    """One consumer fetch as the (key, value, offset, timestamp) records a store restores, each tuple
    made when it is read and dropped at once: a list of ten thousand tuples per fetch (and the writes
    made from them) kept that many more objects alive, which made Python's full garbage collections,
    each over every object of the process, several times as frequent (they took 40% of a restore)."""

    __slots__ = ("_messages",)

    def __init__(self, messages: list[Message]) -> None:
        self._messages = messages

    def __len__(self) -> int:
        return len(self._messages)

    def __getitem__(self, index: int) -> tuple:
        message = self._messages[index]
        return message.key(), message.value(), message.offset(), message.timestamp()[1]

    def __iter__(self) -> Iterator[tuple]:
        for message in self._messages:
            yield message.key(), message.value(), message.offset(), message.timestamp()[1]


def _batches(consumer: Consumer, changelog: TopicPartition) -> Iterator[_Fetched]:
    """The changelog's records, one batch per consumer fetch (one write into the store each)."""
    for batch in read_batches(consumer, [changelog], f"changelog {changelog.topic}-{changelog.partition}"):
        yield _Fetched(batch)


def _source_batches(consumer: Consumer, source: TopicPartition, end: int) -> Iterator[_Fetched]:
    """A source topic's records below ``end`` that have a key (a table source drops null keys)."""
    for batch in read_batches(consumer, [source], f"source topic {source.topic}-{source.partition}"):
        records = [m for m in batch if m.key() is not None and m.offset() < end]
        if records:
            yield _Fetched(records)
        if batch[-1].offset() + 1 >= end:
            return
