"""Committed offsets, kept in memory and in the compacted `__consumer_offsets` topic.

Records use Kafka's offset-commit layout: key (version 1, group, topic, partition) and value
(version 3, offset, leader epoch, metadata, commit timestamp); a null value deletes the key. On
start the topic is replayed, so committed offsets survive restarts.
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from dataclasses import dataclass

from strom.broker.log.manager import CONSUMER_OFFSETS, LogManager
from strom.broker.log.records import BatchHeader, build_batch, iter_records

log = logging.getLogger(__name__)

_KEY_VERSION = 1
_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _read_string(data: bytes, position: int) -> tuple[str, int]:
    (size,) = struct.unpack_from(">h", data, position)
    position += 2
    return data[position:position + size].decode(), position + size


def encode_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", _KEY_VERSION) + _string(group) + _string(topic) + struct.pack(">i", partition)


def decode_key(data: bytes) -> tuple[str, str, int] | None:
    """(group, topic, partition) of an offset-commit key; None for other key kinds (group metadata)."""
    (version,) = struct.unpack_from(">h", data, 0)
    if version not in (0, 1):
        return None
    group, position = _read_string(data, 2)
    topic, position = _read_string(data, position)
    (partition,) = struct.unpack_from(">i", data, position)
    return group, topic, partition


def encode_value(committed: CommittedOffset) -> bytes:
    return (struct.pack(">hqi", _VALUE_VERSION, committed.offset, committed.leader_epoch)
            + _string(committed.metadata) + struct.pack(">q", committed.commit_timestamp))


def decode_value(data: bytes) -> CommittedOffset:
    version, offset = struct.unpack_from(">hq", data, 0)
    position = 10
    leader_epoch = -1
    if version >= 3:
        (leader_epoch,) = struct.unpack_from(">i", data, position)
        position += 4
    metadata, position = _read_string(data, position)
    (timestamp,) = struct.unpack_from(">q", data, position)
    return CommittedOffset(offset, leader_epoch, metadata, timestamp)


class OffsetStore:
    """Committed offsets of every group: group -> (topic, partition) -> CommittedOffset."""

    def __init__(self, logs: LogManager) -> None:
        self._logs = logs
        partitions = logs.config["offsets.topic.num.partitions"]
        segment_bytes = logs.config["offsets.topic.segment.bytes"]
        self._topic = logs.ensure_internal(CONSUMER_OFFSETS, partitions, segment_bytes)
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self._load()

    def partition_for(self, group: str) -> int:
        """The `__consumer_offsets` partition that holds a group's offsets."""
        return zlib.crc32(group.encode()) % len(self._topic.partitions)

    def _load(self) -> None:
        count = 0
        for partition in self._topic.partitions:
            for _, batch in partition.iter_batches(partition.log_start_offset):
                self.replay_batch(batch)
                count += 1
        log.info("replayed %d batch(es) of %s", count, CONSUMER_OFFSETS)

    def replay_batch(self, batch: bytes) -> None:
        """Applies the offset commits of one stored `__consumer_offsets` batch."""
        if BatchHeader.parse(batch).is_control:
            return  # a transaction marker; transactional offsets are committed by the coordinator
        for record in iter_records(batch):
            if record.key is None:
                continue
            key = decode_key(record.key)
            if key is None:
                continue
            group, topic, partition = key
            if record.value is None:
                self.offsets.get(group, {}).pop((topic, partition), None)
            else:
                self.offsets.setdefault(group, {})[(topic, partition)] = decode_value(record.value)

    def commit(self, group: str, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        """Writes the commits to the log first, then makes them visible."""
        if not offsets:
            return
        records = [(encode_key(group, t, p), encode_value(c)) for (t, p), c in offsets.items()]
        self._append(group, records)
        self.offsets.setdefault(group, {}).update(offsets)

    def delete_group(self, group: str) -> None:
        committed = self.offsets.pop(group, {})
        if committed:
            self._append(group, [(encode_key(group, t, p), None) for t, p in committed])

    def delete_offsets(self, group: str, keys: list[tuple[str, int]]) -> None:
        committed = self.offsets.get(group, {})
        present = [k for k in keys if k in committed]
        if present:
            self._append(group, [(encode_key(group, t, p), None) for t, p in present])
            for key in present:
                committed.pop(key)

    def delete_topic(self, topic: str) -> None:
        """Forgets every group's committed offsets of a deleted topic."""
        for group, committed in list(self.offsets.items()):
            self.delete_offsets(group, [key for key in committed if key[0] == topic])

    def expire(self, group: str, retention_ms: int) -> None:
        """Drops offsets of an empty group committed longer than `retention_ms` ago."""
        now = int(time.time() * 1000)
        old = [k for k, c in self.offsets.get(group, {}).items() if now - c.commit_timestamp > retention_ms]
        self.delete_offsets(group, old)

    def _append(self, group: str, records: list[tuple[bytes, bytes | None]]) -> None:
        partition = self._topic.partitions[self.partition_for(group)]
        now = int(time.time() * 1000)
        partition.append_records(lambda base: build_batch(records, now, base))
