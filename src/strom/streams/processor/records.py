"""What a task is fed and what identifies it: raw consumer records (what timestamp extractors and
deserialization handlers see), topic partitions and task ids."""

from __future__ import annotations

from typing import NamedTuple

from strom.streams.processor.api import HeldHeaders

__all__ = ["ConsumerRecord", "TaskId", "TopicPartition"]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class TaskId(NamedTuple):
    """``<subtopology>_<partition>``: the fixed unit of parallelism."""

    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        sub, _, part = text.partition("_")
        return cls(int(sub), int(part))


class ConsumerRecord:
    """A record as read from Kafka, still serialized. Whoever drives a task builds these."""

    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "topic", "value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: HeldHeaders = (),
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self) -> str:
        return f"ConsumerRecord({self.topic}-{self.partition}@{self.offset}, ts={self.timestamp})"
