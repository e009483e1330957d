"""Wires the transaction coordinator to the broker: its state topic, partition logs and groups."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from strom.broker.config import BrokerConfig
from strom.broker.groups.coordinator import GroupCoordinator
from strom.broker.groups.offsets import CommittedOffset
from strom.broker.log.manager import CONSUMER_OFFSETS, TRANSACTION_STATE, LogManager
from strom.broker.log.records import build_batch, iter_records
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.producer_state import AppendRejectedError
from strom.broker.transactions.coordinator import COORDINATOR_EPOCH, TransactionCoordinator
from strom.broker.transactions.markers import control_batch
from strom.broker.transactions.metadata import TopicPartition
from strom.broker.transactions.offsets import PendingTxnOffsets

log = logging.getLogger(__name__)

TRANSACTION_COORDINATOR_FENCED = 52


class StateTopic:
    """``__transaction_state``: one compacted record per transactional id and state change."""

    def __init__(self, logs: LogManager, partitions: int) -> None:
        self._topic = logs.ensure_internal(TRANSACTION_STATE, partitions)

    async def append(self, key: bytes, value: bytes | None) -> None:
        index = zlib.crc32(key) % len(self._topic.partitions)
        now = int(time.time() * 1000)
        self._topic.partitions[index].append_records(lambda base: build_batch([(key, value)], now, base))

    def read(self) -> Iterator[tuple[bytes, bytes | None]]:
        for partition in self._topic.partitions:
            for _, batch in partition.iter_batches(partition.log_start_offset):
                for record in iter_records(batch):
                    if record.key is not None:
                        yield record.key, record.value


class PartitionMarkers:
    """Writes commit/abort markers; on ``__consumer_offsets`` they also settle the pending offsets."""

    def __init__(self, logs: LogManager, groups: GroupCoordinator, pending: PendingTxnOffsets) -> None:
        self._logs = logs
        self._groups = groups
        self._pending = pending

    def partition_exists(self, topic: str, partition: int) -> bool:
        found = self._logs.topics.get(topic)
        return found is not None and 0 <= partition < len(found.partitions)

    def offsets_partition(self, group_id: str) -> TopicPartition:
        return CONSUMER_OFFSETS, self._groups.offsets.partition_for(group_id)

    async def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                           commit: bool, coordinator_epoch: int) -> None:
        if not self.partition_exists(topic, partition):
            log.warning("no marker for %s-%d: the partition was deleted", topic, partition)
            return
        now = int(time.time() * 1000)
        target = self._logs.topics[topic].partitions[partition]
        target.append_records(lambda base: control_batch(producer_id, producer_epoch, commit,
                                                         coordinator_epoch, now, base))
        if topic == CONSUMER_OFFSETS:
            self._settle_offsets(partition, producer_id, commit, now)

    def _settle_offsets(self, partition: int, producer_id: int, commit: bool, now: int) -> None:
        groups = {g for g in self._pending.groups_of(producer_id)
                  if self._groups.offsets.partition_for(g) == partition}
        for group_id, offsets in self._pending.take(producer_id, groups).items():
            if commit:
                self._groups.commit(group_id, {
                    tp: CommittedOffset(o.offset, o.leader_epoch, o.metadata or "", now)
                    for tp, o in offsets.items()})


class TransactionService:
    """The broker's transaction coordinator with everything it needs, and its timeout task."""

    def __init__(self, data_dir: Path, config: BrokerConfig, logs: LogManager, groups: GroupCoordinator,
                 producer_ids: ProducerIdManager) -> None:
        self.pending_offsets = PendingTxnOffsets(data_dir / "transaction-offsets")
        self._markers = PartitionMarkers(logs, groups, self.pending_offsets)
        self.coordinator = TransactionCoordinator(
            StateTopic(logs, config["transaction.state.log.num.partitions"]),
            self._markers,
            producer_ids,
            max_timeout_ms=config["transaction.max.timeout.ms"],
        )
        self._check_interval = config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        self._id_expiration_ms = config["transactional.id.expiration.ms"]
        self._producer_expiration_ms = config["producer.id.expiration.ms"]
        self._logs = logs
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Loads the transaction log, completes decided transactions, starts aborting expired ones."""
        self.coordinator.load()
        await self.coordinator.complete_prepared()
        await self._abort_unknown_transactions()
        self._task = asyncio.create_task(self._expire_forever(), name="transaction-timeouts")

    async def _abort_unknown_transactions(self) -> None:
        """Aborts transactions open in a partition that no transaction of the coordinator holds
        (written before transactional batches were verified): nobody else would ever end them, and
        they hold back the partition's last stable offset."""
        known = self.coordinator.open_transactions()
        for partition in self._logs.all_partitions():
            for producer in partition.producer_state.active_producers():
                tp = (partition.topic, partition.index)
                if producer.current_txn_first_offset is None or (producer.producer_id, tp) in known:
                    continue
                log.warning("%s-%d: aborting the open transaction of producer %d from offset %d: the "
                            "transaction coordinator does not know it", tp[0], tp[1], producer.producer_id,
                            producer.current_txn_first_offset)
                await self._markers.write_marker(tp[0], tp[1], producer.producer_id, producer.epoch,
                                                 commit=False, coordinator_epoch=COORDINATOR_EPOCH)

    async def write_requested_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                     commit: bool, coordinator_epoch: int) -> None:
        """A marker asked for by WriteTxnMarkers (an operator ending a hanging transaction, as
        kafka-transactions' abort does): refused for a fenced producer epoch or an older coordinator
        epoch than the partition last saw; raises AppendRejectedError with the error code."""
        target = self._logs.partition(topic, partition)
        entry = target.producer_state.producer(producer_id) if target is not None else None
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise AppendRejectedError(
                TRANSACTION_COORDINATOR_FENCED, f"coordinator epoch {coordinator_epoch} is older than "
                f"{entry.coordinator_epoch}, the last one written for producer {producer_id}")
        log.warning("%s-%d: writing a%s marker for producer %d epoch %d as requested by WriteTxnMarkers "
                    "(open transaction from offset %s)", topic, partition, " commit" if commit else "n abort",
                    producer_id, producer_epoch, None if entry is None else entry.current_txn_first_offset)
        await self._markers.write_marker(topic, partition, producer_id, producer_epoch, commit,
                                         coordinator_epoch)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _expire_producers(self) -> None:
        now = int(time.time() * 1000)
        removed = sum(p.producer_state.remove_expired(now, self._producer_expiration_ms)
                      for p in self._logs.all_partitions())
        if removed:
            log.info("forgot %d idle producer id(s) (producer.id.expiration.ms)", removed)

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval)
            try:
                await self.coordinator.abort_expired()
                await self.coordinator.expire_transactional_ids(self._id_expiration_ms)
                self._expire_producers()
            except Exception:  # keep the timer alive; the next round retries
                log.exception("expiring transactions failed")
