"""RecordQueue per input partition and PartitionGroup choosing the next record by smallest timestamp."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from strom.kafka.serdes import decoder_of
from strom.streams.processor.internals.records import ConsumerRecord, TopicPartition

UNKNOWN = -1
NEVER = 1 << 62


class RecordQueue:
    """Buffered raw records of one partition; partition time is the largest timestamp taken from it."""

    __slots__ = (
        "consumed_offset", "key_decode", "partition", "partition_time", "records", "source", "value_decode"
    )

    def __init__(self, partition: TopicPartition) -> None:
        self.partition = partition
        self.records: deque[ConsumerRecord] = deque()
        self.partition_time = UNKNOWN
        self.consumed_offset = UNKNOWN
        self.source: Any = None
        self.key_decode: Callable[[bytes], Any] | None = None
        self.value_decode: Callable[[bytes], Any] | None = None

    def read_by(self, source: Any) -> None:
        """``source`` (a SourceNode) reads this partition: its decoders are bound to the topic once."""
        self.source = source
        self.key_decode = decoder_of(source.key_deserializer, self.partition.topic)
        self.value_decode = decoder_of(source.value_deserializer, self.partition.topic)


class PartitionGroup:
    """The task's queues; ``next_run`` picks where the next records come from, so a task processes its
    partitions in timestamp order."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.queues: dict[TopicPartition, RecordQueue] = {}
        self.single: RecordQueue | None = None
        self.buffered = 0
        for partition in partitions:
            self.add_partition(partition)

    def add_partition(self, partition: TopicPartition) -> RecordQueue:
        """A new, empty queue (a topic a pattern source matched after the task was built)."""
        queue = self.queues[partition] = RecordQueue(partition)
        self.single = queue if len(self.queues) == 1 else None
        return queue

    def add(self, partition: TopicPartition, records: Iterable[ConsumerRecord]) -> int:
        queue = self.queues[partition]
        before = len(queue.records)
        queue.records.extend(records)
        added = len(queue.records) - before
        self.buffered += added
        return added

    def next_run(self) -> tuple[RecordQueue, int]:
        """The non-empty queue whose head has the smallest timestamp (ties: the first), and the
        smallest head timestamp of the others: records stay the right choice up to that time."""
        if self.single is not None:
            return self.single, NEVER
        best: RecordQueue | None = None
        best_ts = NEVER
        others = NEVER
        for queue in self.queues.values():
            if queue.records:
                ts = queue.records[0].timestamp
                if best is None or ts < best_ts:
                    others = min(others, best_ts)
                    best, best_ts = queue, ts
                else:
                    others = min(others, ts)
        assert best is not None, "next_run() needs buffered records"
        return best, others

    def clear(self) -> None:
        """Drops buffered records and consumed positions (after an aborted commit)."""
        for queue in self.queues.values():
            queue.records.clear()
            queue.consumed_offset = UNKNOWN
        self.buffered = 0
