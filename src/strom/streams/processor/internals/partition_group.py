"""RecordQueue per input partition and PartitionGroup choosing the next record by smallest timestamp."""

from __future__ import annotations

import base64
import binascii
import logging
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from strom.kafka.serdes import decoder_of
from strom.streams.processor.records import ConsumerRecord, TopicPartition

log = logging.getLogger(__name__)

UNKNOWN = -1
NEVER = 1 << 62

PARTITION_TIME_VERSION = 2
"""Kafka Streams' TopicPartitionMetadata magic byte: version 1 holds the partition time, version 2 adds
processor metadata after it (name -> long, e.g. the last window close time a windowed aggregation
emitted final results for)."""
_PARTITION_TIME = struct.Struct(">bq")
_COUNT = struct.Struct(">i")
_VALUE = struct.Struct(">q")


def encode_partition_time(partition_time: int, processor_metadata: Mapping[str, int] | None = None) -> str:
    """Committed-offset metadata carrying a partition's time and the task's processor metadata, as Kafka
    Streams writes it (base64 of the version byte, the time as a big-endian long, then the metadata
    entries when there are any), so either can resume the other's stream time."""
    raw = _PARTITION_TIME.pack(PARTITION_TIME_VERSION, partition_time)
    if processor_metadata:
        parts = [raw, _COUNT.pack(len(processor_metadata))]
        for key, value in processor_metadata.items():
            name = key.encode()
            parts += [_COUNT.pack(len(name)), name, _VALUE.pack(value)]
        raw = b"".join(parts)
    return base64.b64encode(raw).decode("ascii")


def decode_commit_metadata(metadata: str | None) -> tuple[int, dict[str, int]]:
    """The partition time and processor metadata in committed-offset metadata; (UNKNOWN, {}) when there
    is none or it is not Kafka Streams' format (logged: the stream time then starts over, as Kafka
    Streams does)."""
    if not metadata:
        return UNKNOWN, {}
    try:
        raw = base64.b64decode(metadata, validate=True)
        version, partition_time = _PARTITION_TIME.unpack_from(raw)
        processor_metadata = _processor_metadata(raw, _PARTITION_TIME.size) if version == 2 else {}
    except (binascii.Error, ValueError, struct.error, UnicodeDecodeError):
        log.warning("Committed offset metadata %r is not a partition time; stream time starts over", metadata)
        return UNKNOWN, {}
    if version not in (1, PARTITION_TIME_VERSION):
        log.warning("Committed offset metadata has version %d (supported: 1, %d); stream time starts over",
                    version, PARTITION_TIME_VERSION)
        return UNKNOWN, {}
    return partition_time, processor_metadata


def _processor_metadata(raw: bytes, at: int) -> dict[str, int]:
    if at == len(raw):
        return {}
    (count,), at = _COUNT.unpack_from(raw, at), at + _COUNT.size
    entries = {}
    for _ in range(count):
        (length,), at = _COUNT.unpack_from(raw, at), at + _COUNT.size
        name, at = raw[at:at + length].decode(), at + length
        (entries[name],), at = _VALUE.unpack_from(raw, at), at + _VALUE.size
    return entries


class RecordQueue:
    """Buffered raw records of one partition; partition time is the largest timestamp taken from it.

    A list read from ``head`` on, so the task iterates a run of records with a plain for loop (much
    cheaper per record than popping a deque); consumed records are dropped between runs, in ``consume``.
    """

    __slots__ = (
        "consumed_offset", "head", "key_decode", "partition", "partition_time", "queued_at", "records",
        "source", "value_decode",
    )

    def __init__(self, partition: TopicPartition) -> None:
        self.partition = partition
        self.records: list[ConsumerRecord] = []
        self.head = 0
        self.partition_time = UNKNOWN
        self.consumed_offset = UNKNOWN
        self.source: Any = None
        self.key_decode: Callable[[bytes], Any] | None = None
        self.value_decode: Callable[[bytes], Any] | None = None
        self.queued_at = 0
        """When the queue last joined the ones waiting (became non-empty, or was taken from and kept
        records): of heads with equal timestamps the earliest joined goes first, as in Kafka's queue."""

    def read_by(self, source: Any) -> None:
        """``source`` (a SourceNode) reads this partition: its decoders are bound to the topic once."""
        self.source = source
        self.key_decode = decoder_of(source.key_deserializer, self.partition.topic)
        self.value_decode = decoder_of(source.value_deserializer, self.partition.topic)

    def __len__(self) -> int:
        return len(self.records) - self.head

    def consume(self, count: int) -> None:
        """The next ``count`` (> 0) records were taken; never called while a run iterates ``records``."""
        self.head += count
        self.consumed_offset = self.records[self.head - 1].offset
        if self.head == len(self.records):
            self.records.clear()
            self.head = 0
        elif self.head >= _COMPACT_AFTER and self.head * 2 >= len(self.records):
            del self.records[: self.head]
            self.head = 0

    def clear(self) -> None:
        self.records.clear()
        self.head = 0
        self.consumed_offset = UNKNOWN


_COMPACT_AFTER = 1024
"""Taken records stay in the list until this many (and half of it) were taken: then one del drops them."""


class PartitionGroup:
    """The task's queues; ``next_run`` picks where the next records come from, so a task processes its
    partitions in timestamp order."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.queues: dict[TopicPartition, RecordQueue] = {}
        self.single: RecordQueue | None = None
        self.buffered = 0
        self.joins = 0
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
        if added and not len(queue) - added:
            self.joins += 1
            queue.queued_at = self.joins
        self.buffered += added
        return added

    def consume(self, queue: RecordQueue, count: int) -> None:
        queue.consume(count)
        self.buffered -= count
        if len(queue):
            self.joins += 1
            queue.queued_at = self.joins

    def next_run(self) -> tuple[RecordQueue, int]:
        """The non-empty queue whose head has the smallest timestamp (ties: the one waiting longest,
        ``queued_at``), and the smallest head timestamp of the others: records stay the right choice up
        to that time."""
        if self.single is not None:
            return self.single, NEVER
        best: RecordQueue | None = None
        best_ts = NEVER
        others = NEVER
        for queue in self.queues.values():
            if len(queue):
                ts = queue.records[queue.head].timestamp
                if best is None or ts < best_ts or (ts == best_ts and queue.queued_at < best.queued_at):
                    others = min(others, best_ts)
                    best, best_ts = queue, ts
                else:
                    others = min(others, ts)
        assert best is not None, "next_run() needs buffered records"
        return best, others

    def clear(self) -> None:
        """Drops buffered records and consumed positions (after an aborted commit)."""
        for queue in self.queues.values():
            queue.clear()
        self.buffered = 0
