"""Brings a task's stores up to the end of their changelogs (read_committed) before it processes.

Each store knows the changelog offset its local data reached (its checkpoint); only the records
after it are replayed. Under exactly-once the task's producer has already called
``init_transactions``, so no transaction of this task is open and the log end is stable.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from strom.kafka.reading import end_offset, read_to_end
from strom.streams.processor.internals.task import StreamTask

__all__ = ["restore_task"]


def restore_task(task: StreamTask, consumer: Consumer, stores: Collection[str] | None = None,
                 log_ends: dict[str, int] | None = None) -> int:
    """Replays the changelog tail of every logged store (or of those named in ``stores``) into
    it; returns the number of records applied.

    ``consumer`` must read committed data with ``enable.partition.eof`` on. ``log_ends`` (store
    -> its changelog's end when last read to it, kept by the caller across calls) skips a
    changelog that has not grown since: under exactly-once its end lies past the last record
    (the commit marker), so the offset alone would read it again each time.
    """
    restored = 0
    ends = {} if log_ends is None else log_ends
    offsets = task.restore_offsets()
    for store, tp in task.changelog_partitions().items():
        if stores is not None and store not in stores:
            continue
        start = offsets[store]
        high = end_offset(consumer, tp.topic, tp.partition)
        if not ((start is not None and start >= high) or ends.get(store) == high):
            changelog = TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING if start is None else start)
            restored += task.restore(store, _records(consumer, changelog))
        ends[store] = high
    return restored


def _records(consumer: Consumer, changelog: TopicPartition) -> Iterator[tuple]:
    for message in read_to_end(consumer, [changelog], f"changelog {changelog.topic}-{changelog.partition}"):
        yield message.key(), message.value(), message.offset(), message.timestamp()[1]
