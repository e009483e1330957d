"""The state of one transactional id and its record in ``__transaction_state``.

Records use Kafka's TransactionLogKey/TransactionLogValue version 0 layout, so Kafka's tools can read
the topic. A null value (tombstone) would remove a transactional id.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field, replace

from kio.serial.readers import read_int8, read_int16, read_int32, read_int64, read_legacy_string

TRANSACTION_STATE_TOPIC = "__transaction_state"
NO_PRODUCER_ID = -1


class TxnState(enum.IntEnum):
    """Coordinator-side states of a transaction (numbering as in Kafka's transaction log)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self) -> str:
        """The name DescribeTransactions and ListTransactions report (Kafka's spelling)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_wire_name(cls, name: str) -> TxnState | None:
        return next((s for s in cls if s.wire_name == name), None)


TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1
    last_update_ms: int = -1

    def transition(self, state: TxnState, now_ms: int, **changes: object) -> TransactionMetadata:
        return replace(self, state=state, last_update_ms=now_ms, **changes)

    def key_bytes(self) -> bytes:
        return encode_key(self.transactional_id)

    def value_bytes(self) -> bytes:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        parts = [struct.pack(">hqhib", 0, self.producer_id, self.producer_epoch, self.timeout_ms, self.state),
                 struct.pack(">i", len(by_topic))]
        for topic, partitions in by_topic.items():
            parts.append(_string(topic))
            parts.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
        parts.append(struct.pack(">qq", self.last_update_ms, self.start_ms))
        return b"".join(parts)


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    _version, size = read_int16(data, 0)
    name, _ = read_legacy_string(data, size)
    return name


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    pos = 2  # version
    producer_id, n = read_int64(data, pos)
    pos += n
    epoch, n = read_int16(data, pos)
    pos += n
    timeout_ms, n = read_int32(data, pos)
    pos += n
    state, n = read_int8(data, pos)
    pos += n
    topics, n = read_int32(data, pos)
    pos += n
    partitions: set[TopicPartition] = set()
    for _ in range(max(topics, 0)):
        topic, n = read_legacy_string(data, pos)
        pos += n
        count, n = read_int32(data, pos)
        pos += n
        for _ in range(count):
            partition, n = read_int32(data, pos)
            pos += n
            partitions.add((topic, partition))
    last_update_ms, n = read_int64(data, pos)
    pos += n
    start_ms, _ = read_int64(data, pos)
    return TransactionMetadata(transactional_id, producer_id, epoch, timeout_ms, TxnState(state),
                               frozenset(partitions), start_ms, last_update_ms)
