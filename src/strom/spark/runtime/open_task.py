"""OpenTask: one stream task with its clients, open across the micro-batches of one run.

Opening (``open``) is what a task pays once per Python worker instead of once per batch: the
lease on its directory, a producer (micro-batch: its own, transactional under exactly-once with
``init_transactions`` fencing earlier attempts; real-time: its stream thread's, fenced by the thread),
a consumer of group ``<application.id>``, the committed offsets, the
stores opened and restored to the end of their changelogs. ``positions`` follows the group's
committed offsets as this task commits them, so a later batch can tell whether it starts exactly
where the open task stands.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.errors import BrokerUnavailableError, ProducerFencedError, TransactionStalledError
from strom.kafka import clients
from strom.kafka.clients import CONNECT_AT_ONCE
from strom.kafka.reading import ASK_COMMITTED_S, asked_again, fetch_committed
from strom.kafka.security import refusal
from strom.spark.runtime.lease import LeasedTask, TaskLease
from strom.spark.runtime.producer_sink import ProducerSink
from strom.spark.runtime.restore import restore_task
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig
from strom.streams.processor.internals.global_state_reader import shared_global_stores
from strom.streams.processor.internals.task import StreamTask
from strom.streams.processor.records import TaskId, TopicPartition
from strom.streams.processor.topology import Topology
from strom.streams.state.cache import ThreadCache

__all__ = ["QUICK_EOF", "QUICK_RETRY", "TIMEOUT_S", "Offsets", "OpenTask", "producer_config"]

log = logging.getLogger(__name__)

TIMEOUT_S = 60.0
# The end of a range or changelog is seen when a fetch at the log end returns: do not let the
# broker hold that fetch for fetch.wait.max.ms (500 ms) on every task batch.
QUICK_EOF = {"fetch.wait.max.ms": 10}
# Right after a task's previous batch committed, its coordinator is still writing the markers:
# InitProducerId and a read_committed OffsetFetch are answered "retry" for a few milliseconds.
# librdkafka's default backoff would turn that into half a second per task batch.
QUICK_RETRY = {"retry.backoff.ms": 10, "retry.backoff.max.ms": 100}
_NO_OFFSET = -1001

Offsets = dict[tuple[str, int], int]


def producer_config(config: StreamsConfig) -> dict[str, Any]:
    """librdkafka settings of a stream task's or stream thread's producer."""
    return {**CONNECT_AT_ONCE, **QUICK_RETRY, **config.client_props("producer.")}


class OpenTask(LeasedTask):
    """A StreamTask, its producer and consumer, and the lease on its state directory."""

    def __init__(self, topology: Topology, config: StreamsConfig, task_id: TaskId,
                 owned: tuple[str, ...], run_id: str, producer: Producer | None = None,
                 patient: bool = False) -> None:
        """``producer``: the stream thread's, shared with its other tasks (the thread runs the
        transactions and commits); None: a producer of the task's own, ``patient`` in a micro-batch
        task (``TransactionalProducer``)."""
        self.config = config
        self.run_id = run_id
        self.name = f"{config.application_id}-{task_id}"
        self.eos = config.exactly_once
        self._topology = topology
        self.positions: Offsets = {}
        self.lease = TaskLease.acquire(Path(config[cfg.STATE_DIR]) / config.application_id / str(task_id))
        try:
            self._connect(owned, task_id, producer, patient)
        except BaseException:
            self.lease.release()
            raise

    def _connect(self, owned: tuple[str, ...], task_id: TaskId, producer: Producer | None,
                 patient: bool) -> None:
        bootstrap = self.config[cfg.BOOTSTRAP_SERVERS]
        if producer is None:
            self.sink = ProducerSink.own(bootstrap, producer_config(self.config),
                                         self.name if self.eos else None, f"Stream task {self.name}",
                                         patient)
        else:
            self.sink = ProducerSink(producer, shared=True)
        self.transactions = self.sink.transactions
        """The task's own transactional producer under exactly-once (strom.kafka's policy), else None."""
        self.consumer: Consumer = clients.consumer(
            bootstrap, group_id=self.config.application_id,
            **{**CONNECT_AT_ONCE, **QUICK_RETRY, **self.config.client_props("main.consumer."),
               "enable.partition.eof": True, **QUICK_EOF,
               "isolation.level": "read_committed" if self.eos else "read_uncommitted"})
        self.task = StreamTask(task_id, self._topology.internal, self.config, self.sink,
                               ThreadCache(self.config[cfg.STATESTORE_CACHE_MAX_BYTES]),
                               partitions=[TopicPartition(t, task_id.partition) for t in owned])

    def _clients(self) -> tuple[Any, ...]:
        return self.consumer, self.sink

    def open(self, partitions: list[tuple[str, int]]) -> int:
        """Fences earlier attempts, reads the committed offsets of ``partitions`` (their metadata
        restores the task's stream time), catches up the global stores, opens and restores the stores;
        returns the changelog records restored."""
        if self.transactions is not None:
            self.transactions.init_transactions()
        committed = self._committed(partitions)
        self.positions = {(tp.topic, tp.partition): tp.offset for tp in committed}
        self.task.initialize_task_time({TopicPartition(tp.topic, tp.partition): tp.metadata
                                        for tp in committed})
        self.refresh_global_stores()
        self.task.initialize()
        restored = restore_task(self.task, self.consumer, committed=self._source_positions())
        self.task.complete_restoration()
        return restored

    def _source_positions(self) -> Offsets:
        """The committed offsets of the source partitions that are changelogs (where their restore
        ends), also of those this batch does not read."""
        sources = [(tp.topic, tp.partition) for tp in self.task.source_changelog_partitions().values()]
        missing = [tp for tp in sources if tp not in self.positions]
        committed = self._committed(missing) if missing else []
        return {**self.positions, **{(tp.topic, tp.partition): tp.offset for tp in committed}}

    def refresh_global_stores(self) -> None:
        """Applies what the global tables' topics gained since the last batch (this process's
        global stores are shared by its tasks; ``global/<pid>`` as a persistent store cannot be
        open in two Python workers)."""
        app_dir = Path(self.config[cfg.STATE_DIR]) / self.config.application_id
        self.task.context.global_stores = shared_global_stores(
            self._topology.internal, self.config, app_dir / "global" / str(os.getpid()), self.consumer)

    def begin(self, fencing_probe: Offsets | None = None) -> None:
        """Starts the batch's transaction. A reused task passes the batch's end offsets as
        ``fencing_probe``: sending them first makes a producer fenced since its last batch fail here,
        before any record is processed (a task just opened was fenced-checked by init_transactions)."""
        if self.transactions is not None:
            if not self.transactions.in_transaction:
                self.transactions.begin_transaction()
            if fencing_probe is not None:
                self._send_offsets(fencing_probe)

    def resume(self, fencing_probe: Offsets | None) -> bool:
        """Takes a parked task up again (micro-batch): global stores refreshed, the transaction begun
        with ``fencing_probe``. False, with the task closed, if another attempt took it over or its
        producer stalled (``strom.kafka.transactional``)."""
        try:
            self.refresh_global_stores()
            self.begin(fencing_probe)
        except ProducerFencedError:
            log.info("Task %s: taken over since it parked; opening it again", self.name)
            self.close()
            return False
        except TransactionStalledError as exc:
            log.warning("%s Opening the task again.", exc)
            self.close()
            return False
        except BaseException:
            self.close()
            raise
        return True

    def commit(self, offsets: Offsets) -> None:
        """Commits the processed batch: ``offsets`` with the partition times as their metadata (sent
        again into the transaction under exactly-once: the times are known only now)."""
        if self.transactions is not None:
            if offsets:
                self._send_offsets(offsets)
            self.transactions.commit_transaction()
        elif offsets:
            self.call(self.consumer.commit, offsets=self.with_metadata(offsets), asynchronous=False)
        self.positions.update(offsets)

    def _send_offsets(self, offsets: Offsets) -> None:
        assert self.transactions is not None
        self.transactions.send_offsets_to_transaction(self.with_metadata(offsets),
                                                      self.consumer.consumer_group_metadata())

    def with_metadata(self, offsets: Offsets) -> list[KafkaTopicPartition]:
        """``offsets`` to commit, each with its partition's time as metadata (Kafka Streams' format)."""
        return [KafkaTopicPartition(topic, partition, offset,
                                    metadata=self.task.commit_metadata(TopicPartition(topic, partition)))
                for (topic, partition), offset in offsets.items()]

    def abort(self) -> None:
        if self.transactions is not None:
            self.transactions.abort_transaction()  # a failure is logged: the next opener aborts it
        self.task.abort()

    def _committed(self, partitions: list[tuple[str, int]]) -> list[KafkaTopicPartition]:
        """The committed offsets (with their metadata) of those of ``partitions`` that have one."""
        requested = [KafkaTopicPartition(t, p) for t, p in partitions]
        try:
            result = self.call(fetch_committed, self.consumer, requested, self._task_timeout_s())
        except BrokerUnavailableError as exc:
            if not _waited(exc):
                raise
            waited = self.config[cfg.TASK_TIMEOUT_MS]
            raise BrokerUnavailableError(f"{exc} It waited task.timeout.ms={waited} for the cluster; "
                                         "raise it to wait longer.") from exc
        return [tp for tp in result if tp.offset != _NO_OFFSET]

    def _task_timeout_s(self) -> float:
        """As Kafka Streams' ``task.timeout.ms``: a cluster that does not answer (a coordinator moving,
        loading, or cut off) stalls the task this long before its thread fails; 0 is one attempt."""
        return max(self.config[cfg.TASK_TIMEOUT_MS] / 1000, ASK_COMMITTED_S)

    def call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        """Calls a consumer method; Kafka errors become BrokerUnavailableError (the producer's calls
        follow ``strom.kafka.transactional``'s policy)."""
        try:
            return method(*args, **kwargs)
        except KafkaException as exc:
            if (refused := refusal(self.config.client_props("main.consumer."), exc.args[0],
                                   group=self.config.application_id)) is not None:
                raise refused from None
            raise BrokerUnavailableError(
                f"Stream task {self.name} failed in {method.__name__}: {exc.args[0].str()}. Check the broker "
                f"at {self.config[cfg.BOOTSTRAP_SERVERS]}.") from exc


def _waited(error: BrokerUnavailableError) -> bool:
    """Whether ``fetch_committed`` gave up on an error it retries (it waited its whole timeout), not on
    one it raises at once."""
    cause = error.__cause__
    return isinstance(cause, KafkaException) and asked_again(cause.args[0])
