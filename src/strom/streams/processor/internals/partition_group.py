"""RecordQueue per input partition and PartitionGroup choosing the next record by smallest timestamp."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from strom.streams.processor.internals.records import ConsumerRecord, TopicPartition

UNKNOWN = -1


class RecordQueue:
    """Buffered raw records of one partition; partition time is the largest timestamp taken from it."""

    __slots__ = ("consumed_offset", "partition", "partition_time", "records", "source")

    def __init__(self, partition: TopicPartition) -> None:
        self.partition = partition
        self.records: deque[ConsumerRecord] = deque()
        self.partition_time = UNKNOWN
        self.consumed_offset = UNKNOWN
        self.source: Any = None  # the source node reading this partition's topic

    def head_timestamp(self) -> int:
        return self.records[0].timestamp if self.records else UNKNOWN

    def __len__(self) -> int:
        return len(self.records)


class PartitionGroup:
    """The task's queues. ``next_queue`` returns the non-empty queue whose head has the smallest timestamp
    (ties by partition order), so a task processes its partitions in timestamp order."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.queues: dict[TopicPartition, RecordQueue] = {tp: RecordQueue(tp) for tp in partitions}
        self.single = next(iter(self.queues.values())) if len(self.queues) == 1 else None
        self.stream_time = UNKNOWN
        self.buffered = 0

    def add(self, partition: TopicPartition, records: Iterable[ConsumerRecord]) -> int:
        queue = self.queues[partition]
        before = len(queue.records)
        queue.records.extend(records)
        added = len(queue.records) - before
        self.buffered += added
        return added

    def next_queue(self) -> RecordQueue | None:
        if self.buffered == 0:
            return None
        if self.single is not None:
            return self.single
        best = None
        best_ts = 0
        for queue in self.queues.values():
            if queue.records:
                ts = queue.records[0].timestamp
                if best is None or ts < best_ts:
                    best, best_ts = queue, ts
        return best

    def clear(self) -> None:
        """Drops buffered records and consumed positions (after an aborted commit)."""
        for queue in self.queues.values():
            queue.records.clear()
            queue.consumed_offset = UNKNOWN
        self.buffered = 0
