"""The transaction coordinator: transactional ids, epochs, and the two-phase commit of KIP-98.

Every state change is appended to ``__transaction_state`` before the coordinator acts on it. Ending a
transaction records PrepareCommit/PrepareAbort, writes a commit/abort marker into every partition of
the transaction (including the ``__consumer_offsets`` partition that holds its offsets), then records
CompleteCommit/CompleteAbort. After a restart, transactions found in a Prepare state are completed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Protocol

from strom.broker.producer_ids import ProducerIdManager
from strom.broker.transactions.metadata import (
    TopicPartition,
    TransactionMetadata,
    TxnState,
    decode_key,
    decode_value,
)

log = logging.getLogger(__name__)

# Kafka error codes the coordinator answers with.
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
OPERATION_NOT_ATTEMPTED = 55
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105

MAX_EPOCH = 2**15 - 2  # Short.MAX_VALUE - 1: the last epoch before a new producer id is needed
COORDINATOR_EPOCH = 0  # a single broker coordinates every transaction


class CoordinatorError(Exception):
    """A request the coordinator refuses; ``error_code`` is the Kafka error for the response."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class TransactionLog(Protocol):
    """The ``__transaction_state`` topic, as the broker stores it."""

    async def append(self, key: bytes, value: bytes | None) -> None:
        """Appends one record (None: a tombstone) and returns once it is durable."""

    def read(self) -> Iterable[tuple[bytes, bytes | None]]:
        """Every record (key, value) in log order, for loading at start."""


class MarkerWriter(Protocol):
    """The partitions a transaction touches, as the broker stores them."""

    def partition_exists(self, topic: str, partition: int) -> bool: ...

    async def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                           commit: bool, coordinator_epoch: int) -> None:
        """Appends a commit or abort control batch to the partition (and completes its pending offsets)."""

    def offsets_partition(self, group_id: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition that stores the group's offsets."""


class TransactionCoordinator:
    def __init__(self, txn_log: TransactionLog, markers: MarkerWriter, producer_ids: ProducerIdManager,
                 max_timeout_ms: int = 900_000, clock: Callable[[], float] = time.time) -> None:
        self._log = txn_log
        self._markers = markers
        self._producer_ids = producer_ids
        self._max_timeout_ms = max_timeout_ms
        self._clock = clock
        self._txns: dict[str, TransactionMetadata] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- start -----------------------------------------------------------------------------------
    def load(self) -> None:
        """Reads ``__transaction_state``: the last record of each transactional id wins."""
        for key, value in self._log.read():
            txn_id = decode_key(key)
            if value is None:
                self._txns.pop(txn_id, None)
            else:
                self._txns[txn_id] = decode_value(txn_id, value)
        log.info("transaction coordinator loaded %d transactional ids", len(self._txns))

    async def complete_prepared(self) -> None:
        """Finishes transactions a crash left between their decision and its completion."""
        for txn_id, txn in list(self._txns.items()):
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                async with self._locks[txn_id]:
                    log.info("completing %s of %r after restart", txn.state.wire_name, txn_id)
                    await self._write_markers_and_complete(self._txns[txn_id])

    # -- InitProducerId --------------------------------------------------------------------------
    async def init_producer_id(self, txn_id: str | None, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[int, int]:
        """Producer id and epoch for a producer; for a transactional id, bumps the epoch (fencing zombies)."""
        if txn_id is None:
            if producer_id >= 0 and 0 <= producer_epoch < MAX_EPOCH:
                return producer_id, producer_epoch + 1  # KIP-360 epoch bump of an idempotent producer
            return self._producer_ids.allocate(), 0
        if not 0 < timeout_ms <= self._max_timeout_ms:
            raise CoordinatorError(
                INVALID_TRANSACTION_TIMEOUT,
                f"transaction.timeout.ms={timeout_ms} is outside (0, {self._max_timeout_ms}] "
                "(transaction.max.timeout.ms of the broker)")
        async with self._locks[txn_id]:
            txn = self._txns.get(txn_id)
            if txn is None:
                txn = TransactionMetadata(txn_id, self._producer_ids.allocate(), 0, timeout_ms,
                                          TxnState.EMPTY, last_update_ms=self._now_ms())
                await self._persist(txn)
                return txn.producer_id, txn.producer_epoch
            self._check_init_request(txn, producer_id, producer_epoch)
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                await self._write_markers_and_complete(txn)
            elif txn.state == TxnState.ONGOING:
                await self._fence_and_abort(txn)
            txn = self._txns[txn_id]
            pid, epoch = txn.producer_id, txn.producer_epoch + 1
            if epoch > MAX_EPOCH:
                pid, epoch = self._producer_ids.allocate(), 0
            txn = txn.transition(TxnState.EMPTY, self._now_ms(), producer_id=pid, producer_epoch=epoch,
                                 timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1)
            await self._persist(txn)
            return pid, epoch

    @staticmethod
    def _check_init_request(txn: TransactionMetadata, producer_id: int, producer_epoch: int) -> None:
        if producer_id < 0:
            return
        if producer_id != txn.producer_id or producer_epoch != txn.producer_epoch:
            raise CoordinatorError(
                PRODUCER_FENCED,
                f"producer {producer_id} epoch {producer_epoch} is not the current producer "
                f"{txn.producer_id} epoch {txn.producer_epoch} of {txn.transactional_id!r}")

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------
    async def add_partitions(self, txn_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Adds partitions to the ongoing transaction; returns an error code per partition."""
        wanted = set(partitions)
        unknown = {tp for tp in wanted if not self._markers.partition_exists(*tp)}
        if unknown:
            return {tp: UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else OPERATION_NOT_ATTEMPTED
                    for tp in wanted}
        async with self._locks[txn_id]:
            txn = self._current(txn_id, producer_id, producer_epoch)
            await self._add(txn, wanted)
        return dict.fromkeys(wanted, 0)

    async def add_offsets(self, txn_id: str, producer_id: int, producer_epoch: int, group_id: str) -> None:
        async with self._locks[txn_id]:
            txn = self._current(txn_id, producer_id, producer_epoch)
            await self._add(txn, {self._markers.offsets_partition(group_id)})

    async def _add(self, txn: TransactionMetadata, partitions: set[TopicPartition]) -> None:
        if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise CoordinatorError(CONCURRENT_TRANSACTIONS,
                                   f"{txn.transactional_id!r} is completing its previous transaction")
        if txn.state == TxnState.ONGOING and partitions <= txn.partitions:
            return
        now = self._now_ms()
        start = txn.start_ms if txn.state == TxnState.ONGOING else now
        await self._persist(txn.transition(TxnState.ONGOING, now, partitions=txn.partitions | partitions,
                                           start_ms=start))

    def check_offset_commit(self, txn_id: str, producer_id: int, producer_epoch: int,
                            group_id: str) -> None:
        """TxnOffsetCommit is valid only from the current producer inside a transaction holding the group."""
        txn = self._current(txn_id, producer_id, producer_epoch)
        if txn.state != TxnState.ONGOING or self._markers.offsets_partition(group_id) not in txn.partitions:
            raise CoordinatorError(INVALID_TXN_STATE,
                                   f"{txn_id!r} sent offsets for group {group_id!r} without AddOffsetsToTxn")

    def verify_produce(self, txn_id: str | None, producer_id: int, producer_epoch: int,
                       partition: TopicPartition) -> None:
        """A transactional batch may be written only by the producer of an ongoing transaction that
        holds the partition (KIP-890's verification): otherwise nobody would ever end the
        transaction it opens, and read_committed consumers would wait at it for ever."""
        txn = self._txns.get(txn_id) if txn_id is not None else None
        if txn is None or txn.producer_id != producer_id:
            raise CoordinatorError(
                INVALID_TXN_STATE, f"producer {producer_id} has no transaction of transactional id "
                f"{txn_id!r}: a transactional producer calls InitProducerId and AddPartitionsToTxn first")
        if producer_epoch < txn.producer_epoch:
            raise CoordinatorError(INVALID_PRODUCER_EPOCH, f"producer {producer_id} epoch {producer_epoch} "
                                   f"of {txn_id!r} was fenced by epoch {txn.producer_epoch}")
        if producer_epoch != txn.producer_epoch or txn.state != TxnState.ONGOING \
                or partition not in txn.partitions:
            raise CoordinatorError(
                INVALID_TXN_STATE, f"{txn_id!r} has not added {partition[0]}-{partition[1]} to an ongoing "
                f"transaction of epoch {producer_epoch} (state {txn.state.wire_name})")

    def open_transactions(self) -> set[tuple[int, TopicPartition]]:
        """(producer id, partition) of every transaction that is ongoing or being completed."""
        open_states = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        return {(t.producer_id, tp) for t in self._txns.values() if t.state in open_states
                for tp in t.partitions}

    # -- EndTxn ----------------------------------------------------------------------------------
    async def end_txn(self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool) -> None:
        async with self._locks[txn_id]:
            txn = self._current(txn_id, producer_id, producer_epoch)
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if txn.state == done:
                return  # a retried EndTxn
            if txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                if (txn.state == TxnState.PREPARE_COMMIT) != commit:
                    raise CoordinatorError(INVALID_TXN_STATE,
                                           f"{txn_id!r} is already in {txn.state.wire_name}")
                await self._write_markers_and_complete(txn)
                return
            if txn.state == TxnState.EMPTY and not commit:
                return  # aborting a transaction that never added a partition: nothing to do
            if txn.state != TxnState.ONGOING:
                raise CoordinatorError(
                    INVALID_TXN_STATE,
                    f"{txn_id!r} cannot {'commit' if commit else 'abort'} in state {txn.state.wire_name}")
            prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            txn = txn.transition(prepare, self._now_ms())
            await self._persist(txn)
            await self._write_markers_and_complete(txn)

    async def _fence_and_abort(self, txn: TransactionMetadata) -> None:
        """Aborts the open transaction with a bumped epoch, so the old producer can no longer write."""
        fenced = txn.transition(TxnState.PREPARE_ABORT, self._now_ms(),
                                producer_epoch=min(txn.producer_epoch + 1, MAX_EPOCH))
        await self._persist(fenced)
        await self._write_markers_and_complete(fenced)

    async def _write_markers_and_complete(self, txn: TransactionMetadata) -> None:
        commit = txn.state == TxnState.PREPARE_COMMIT
        for topic, partition in sorted(txn.partitions):
            await self._markers.write_marker(topic, partition, txn.producer_id, txn.producer_epoch, commit,
                                             COORDINATOR_EPOCH)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        await self._persist(txn.transition(done, self._now_ms(), partitions=frozenset()))

    # -- timeouts --------------------------------------------------------------------------------
    async def abort_expired(self) -> list[str]:
        """Aborts (and fences) transactions open longer than their transaction.timeout.ms."""
        now = self._now_ms()
        expired = [t.transactional_id for t in self._txns.values()
                   if t.state == TxnState.ONGOING and now - t.start_ms > t.timeout_ms]
        aborted = []
        for txn_id in expired:
            async with self._locks[txn_id]:
                txn = self._txns[txn_id]
                if txn.state == TxnState.ONGOING and now - txn.start_ms > txn.timeout_ms:
                    log.info("aborting transaction of %r: open for %d ms > transaction.timeout.ms=%d",
                             txn_id, now - txn.start_ms, txn.timeout_ms)
                    await self._fence_and_abort(txn)
                    aborted.append(txn_id)
        return aborted

    async def expire_transactional_ids(self, expiration_ms: int) -> list[str]:
        """Forgets transactional ids idle longer than transactional.id.expiration.ms (no open transaction)."""
        now = self._now_ms()
        idle = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        expired = []
        for txn_id in [t.transactional_id for t in self._txns.values() if t.state in idle]:
            async with self._locks[txn_id]:
                txn = self._txns.get(txn_id)
                if txn is not None and txn.state in idle and now - txn.last_update_ms > expiration_ms:
                    await self._log.append(txn.key_bytes(), None)
                    del self._txns[txn_id]
                    self._locks.pop(txn_id, None)
                    expired.append(txn_id)
        if expired:
            log.info("expired %d idle transactional id(s)", len(expired))
        return expired

    # -- operators -------------------------------------------------------------------------------
    def list_transactions(self, states: Iterable[TxnState] = (), producer_ids: Iterable[int] = (),
                          min_duration_ms: int = -1) -> list[TransactionMetadata]:
        wanted_states, wanted_pids, now = set(states), set(producer_ids), self._now_ms()
        def running_long(t: TransactionMetadata) -> bool:
            return t.state == TxnState.ONGOING and now - t.start_ms >= min_duration_ms

        return [t for t in self._txns.values()
                if (not wanted_states or t.state in wanted_states)
                and (not wanted_pids or t.producer_id in wanted_pids)
                and (min_duration_ms < 0 or running_long(t))]

    def describe(self, txn_id: str) -> TransactionMetadata | None:
        return self._txns.get(txn_id)

    # -- helpers ---------------------------------------------------------------------------------
    def _current(self, txn_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata:
        txn = self._txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            raise CoordinatorError(INVALID_PRODUCER_ID_MAPPING,
                                   f"producer {producer_id} does not own transactional id {txn_id!r}")
        if producer_epoch != txn.producer_epoch:
            raise CoordinatorError(
                PRODUCER_FENCED,
                f"producer {producer_id} epoch {producer_epoch} of {txn_id!r} was fenced by epoch "
                f"{txn.producer_epoch}")
        return txn

    async def _persist(self, txn: TransactionMetadata) -> None:
        await self._log.append(txn.key_bytes(), txn.value_bytes())
        self._txns[txn.transactional_id] = txn
