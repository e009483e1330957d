"""A consumer group's committed offsets against the log's offsets, through one admin client: lag for the
status line and metrics of ``strom run``, and the offsets ``strom streams reset`` moves a group to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from strom.errors import BrokerUnavailableError

__all__ = ["Partition", "PartitionOffsets", "committed", "group_offsets", "list_offsets", "reset"]

Partition = tuple[str, int]
_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class PartitionOffsets:
    """``committed`` is None when the group never committed the partition: its lag then counts from the
    first record still kept (``earliest``), as the application would start there."""

    committed: int | None
    earliest: int
    latest: int

    @property
    def lag(self) -> int:
        start = self.earliest if self.committed is None else self.committed
        return max(0, self.latest - start)


def _wait(futures: Mapping, what: str) -> list:
    try:
        return [future.result(timeout=_TIMEOUT_S) for future in futures.values()]
    except KafkaException as exc:
        raise BrokerUnavailableError(f"Could not {what}: {exc}. Check that the brokers in "
                                     "bootstrap.servers are running.") from exc


def list_offsets(admin: AdminClient, partitions: Iterable[Partition], spec: KafkaOffsetSpec,
                 ) -> dict[Partition, int]:
    """Offsets of ``spec`` (earliest, latest, or the first at a timestamp) per partition; latest is the
    last stable offset (read_committed), so open transactions do not count. A timestamp after the
    last record gives the latest offset."""
    requests = {TopicPartition(t, p): spec for t, p in partitions}
    if not requests:
        return {}
    futures = admin.list_offsets(requests, isolation_level=IsolationLevel.READ_COMMITTED,
                                 request_timeout=_TIMEOUT_S)
    results = _wait(futures, "list partition offsets")
    out = {}
    for tp, result in zip(futures, results, strict=True):
        out[(tp.topic, tp.partition)] = result.offset
    if any(offset < 0 for offset in out.values()):  # a timestamp after the last record
        latest = list_offsets(admin, [p for p, o in out.items() if o < 0], KafkaOffsetSpec.latest())
        out.update(latest)
    return out


def committed(admin: AdminClient, group: str, partitions: Iterable[Partition]) -> dict[Partition, int]:
    """The group's committed offsets (partitions it never committed are left out)."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in partitions])
    if not request.topic_partitions:
        return {}
    (result,) = _wait(admin.list_consumer_group_offsets([request], require_stable=True,
                                                        request_timeout=_TIMEOUT_S),
                      f"read the committed offsets of group {group!r}")
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def group_offsets(admin: AdminClient, group: str, partitions: Iterable[Partition]
                  ) -> dict[Partition, PartitionOffsets]:
    """Committed, earliest and latest offsets of every partition, for lag."""
    partitions = list(partitions)
    done = committed(admin, group, partitions)
    earliest = list_offsets(admin, partitions, KafkaOffsetSpec.earliest())
    latest = list_offsets(admin, partitions, KafkaOffsetSpec.latest())
    return {tp: PartitionOffsets(done.get(tp), earliest[tp], latest[tp]) for tp in partitions}


def reset(admin: AdminClient, group: str, offsets: Mapping[Partition, int]) -> None:
    """Commits ``offsets`` for ``group``; the group must have no active members (Kafka's rule)."""
    if not offsets:
        return
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
    _wait(admin.alter_consumer_group_offsets([request], request_timeout=_TIMEOUT_S),
          f"reset the offsets of group {group!r}")
