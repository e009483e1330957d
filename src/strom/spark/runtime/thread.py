"""StreamThread: one Spark task of a real-time batch, Kafka Streams' ``StreamThread`` on Spark.

For the length of a batch (a checkpoint interval of minutes) the thread hosts the stream tasks the
driver assigned it, consumes their partitions itself with one librdkafka consumer (no hop through
the JVM), processes each record depth-first as it arrives, and commits every
``commit.interval.ms``. The thread has one producer, shared by its tasks: under exactly_once_v2 it
commits one transaction per commit interval holding every task's outputs, repartition and changelog
records and input offsets (``transactional.id`` ``<application.id>-stream-thread-<index>``: the
thread fences the previous holder of its slot with ``init_transactions`` before it says hello, and
the driver fences the slots of threads that did not come; docs/runtime.md, "What fences what"); then
the stores apply the writes. A failure aborts that transaction, so every task of the thread goes back
to its last commit. A thread whose transactions write to many partitions sends its caches whenever it
has caught up with its input, so that its commits do not wait for librdkafka's produce requests one
round after another (``IN_FLIGHT``). WALL_CLOCK_TIME punctuations fire on time between polls, with or
without records.

At the end of the batch the tasks stay open in this Python worker (``PARKED``): when the next
batch's thread starts here, the driver gives it the same tasks back (their stores stay open).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.errors import (
    BrokerUnavailableError,
    ProcessorStateError,
    TransactionAbortableError,
    TransactionStalledError,
)
from strom.kafka import clients
from strom.kafka.clients import CONNECT_AT_ONCE
from strom.kafka.security import refusal
from strom.kafka.transactional import Patience, TransactionalProducer, fenced, send_timed_out
from strom.spark.queries.server import seed_positions, serve_queries
from strom.spark.runtime.control import ABORTED, FENCED, FINISHED, ControlClient
from strom.spark.runtime.executor import SUMMARY_SCHEMA, TaskSummary, executor_config
from strom.spark.runtime.open_task import QUICK_RETRY, Offsets, OpenTask, producer_config
from strom.spark.runtime.parked import PARKED
from strom.spark.runtime.producer_sink import FLUSH_TIMEOUT_S
from strom.spark.runtime.standby import STANDBYS, UPDATE_EVERY_S, StandbyTask, update_all
from strom.spark.startup import mark, process_age_s
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig
from strom.streams.processor.records import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.topology import Topology

__all__ = [
    "IN_FLIGHT", "LOW_LATENCY_FETCH", "MAX_POLL_RECORDS", "POLL_S", "RunningTask", "StreamThread",
    "StreamThreadRunner", "ThreadPlan", "transactional_id",
]

log = logging.getLogger(__name__)

POLL_S = 0.01
"""Longest wait for records: the pace of wall-clock punctuation and of noticing a stop."""
MAX_POLL_RECORDS = 5_000
IN_FLIGHT = 5
"""Produce requests a transactional librdkafka producer keeps in flight per connection (its maximum with
idempotence); it sends one per partition (librdkafka issue 1700)."""
# A thread waits on records, not on the broker: return fetches at once when nothing is there (the
# loop polls again) and refill librdkafka's queue without its default one-second back-off.
LOW_LATENCY_FETCH = {"fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 1, "enable.partition.eof": True}


def transactional_id(application_id: str, slot: int) -> str:
    """The ``transactional.id`` of stream thread slot ``slot`` (the thread of that index in every batch)."""
    return f"{application_id}-stream-thread-{slot}"


@dataclass(frozen=True)
class ThreadPlan:
    """What every thread of one real-time batch needs, shipped to the executors with the function."""

    run_id: str
    batch: int
    threads: int
    control_address: tuple[str, int]
    token: str
    duration_s: float
    owned: dict[str, tuple[str, ...]]
    """task id -> the source topics its partition is read from."""


class RunningTask:
    """An open task in this thread: its read positions and what it did since the last report."""

    def __init__(self, task: OpenTask, owned: tuple[str, ...], reused: bool, restored: int) -> None:
        self.open = task
        partition = task.task.id.partition
        self.partitions = {(topic, partition): TopicPartition(topic, partition) for topic in owned}
        self.read: Offsets = dict(task.positions)
        self.summary = TaskSummary(str(task.task.id), restored=restored, reused=reused)
        self._changelogs = {tp.topic for tp in task.task.changelog_partitions().values()}
        self._sent_before = self._output_sent()
        self._reported: dict[str, int] | None = None
        self._records_committed = 0
        self.commits = 0
        self.process_s = 0.0
        self.commit_s = 0.0

    def _output_sent(self) -> int:
        return sum(n for topic, n in self.open.sink.sent.items() if topic not in self._changelogs)

    def uncommitted(self) -> Offsets:
        return {tp: offset for tp, offset in self.read.items() if self.open.positions.get(tp) != offset}

    def needs_commit(self) -> bool:
        return (bool(self.uncommitted()) or self.open.task.commit_needed
                or self.summary.records != self._records_committed)

    def committed(self) -> None:
        self._records_committed = self.summary.records
        self.commits += 1

    def progress_delta(self) -> dict[str, int]:
        """Counters to add to the driver's figures since the last report (the first report of a
        batch also counts the batch, and whether the task was reused and what it restored)."""
        self.summary.output = self._output_sent() - self._sent_before
        now = {"records": self.summary.records, "output": self.summary.output,
               "restored": self.summary.restored, "commits": self.commits,
               "millis": round(self.process_s * 1000, 3), "commit_millis": round(self.commit_s * 1000, 3)}
        if self._reported is None:
            delta = {**now, "batches": 1, "reused": int(self.summary.reused)}
        else:
            delta = {key: value - self._reported[key] for key, value in now.items()}
        self._reported = now
        return delta


class StreamThread:
    """Runs its assigned stream tasks until the batch's deadline or a stop; returns their summaries."""

    def __init__(self, topology: Topology, config: StreamsConfig, plan: ThreadPlan, index: int) -> None:
        self.topology = topology
        self.config = config
        self.plan = plan
        self.index = index
        self.interval_s = config[cfg.COMMIT_INTERVAL_MS] / 1000
        self.tasks: dict[str, RunningTask] = {}
        self.routes: dict[tuple[str, int], RunningTask] = {}
        self.standbys: dict[str, StandbyTask] = {}
        self._standby_restored: dict[str, int] = {}
        self._background = ThreadPoolExecutor(thread_name_prefix="strom-thread")
        """Opens tasks side by side; sends a commit's offsets while the tasks flush."""
        self.transactions: TransactionalProducer | None = None
        """The thread's transactional producer under exactly-once (``strom.kafka.transactional``)."""
        self.producer: Producer | None = None
        """The thread's producer, shared by its tasks."""
        self._reusable: set[str] = set()
        self._wide = False
        """The last commit wrote to more partitions than one round of produce requests covers."""
        self._patience = Patience()
        """Shared by the successive producers of this thread's slot (a reopening keeps it)."""

    def run(self) -> list[TaskSummary]:
        started = time.monotonic()
        age = process_age_s()
        mark("thread-started", f"thread {self.index} batch {self.plan.batch} worker age "
             f"{'?' if age is None else f'{age:.3f}'} s, its CPU {time.process_time():.3f} s")
        control = ControlClient(self.plan.control_address, self.plan.token, self.plan.batch, self.index)
        try:
            try:
                self._start_producer()  # fences the slot's previous holder before any task is assigned
            except BaseException as exc:
                control.failed(exc)
                raise
            queries = serve_queries(self, self.config.application_id, self.plan.token,
                                    self.plan.control_address)
            assigned = control.hello(PARKED.held(self.config.application_id), self._standbys_held(),
                                     f"{socket.gethostname()}:{self.config[cfg.STATE_DIR]}", queries)
            self._reusable = set(control.reusable)
            mark("assigned", f"thread {self.index} tasks {assigned}")
            if not assigned or control.stopping.is_set():
                control.report({}, FINISHED)
                return []
            consumer = None
            try:
                self._close_standbys_except(control.standbys, assigned)
                consumer = self._consumer()  # it connects while the tasks open
                self._open_all(assigned)
                seed_positions(self.tasks.values())
                mark("tasks-open", f"thread {self.index}")
                self._open_standbys(control.standbys)
                self._assign(consumer)
                mark("consumer", f"thread {self.index}")
            except BaseException as exc:
                control.failed(exc)
                self._close_standbys()
                if consumer is not None:
                    consumer.close()
                raise
            try:
                ended = self._run_tasks(consumer, control, started + self.plan.duration_s)
            except BaseException as exc:
                control.failed(exc)
                self._abort_all()
                self._close_standbys()
                raise
            finally:
                consumer.close()
            if ended != FINISHED:
                return []
            self._report(control, FINISHED)
        finally:
            control.close()
            self._background.shutdown()
        for task in self.tasks.values():
            PARKED.park(self._key(task.summary.task), task.open)
            task.summary.millis = (time.monotonic() - started) * 1000
        for task_id, standby in self.standbys.items():
            STANDBYS.park(self._key(task_id), standby)
        return [task.summary for task in self.tasks.values()]

    def _start_producer(self) -> None:
        """The thread's producer; under exactly-once transactional, with ``init_transactions`` fencing
        every earlier holder of this thread's slot and aborting its open transaction."""
        bootstrap = self.config[cfg.BOOTSTRAP_SERVERS]
        settings = {**clients.JAVA_PARTITIONER, **producer_config(self.config)}
        if not self.config.exactly_once:
            self.producer = clients.producer(bootstrap, **settings)
            return
        self.transactions = TransactionalProducer(
            bootstrap, transactional_id(self.config.application_id, self.index),
            f"Stream thread {self.index} of {self.config.application_id}", patience=self._patience,
            **settings)
        self.transactions.init_transactions()
        self.producer = self.transactions.producer

    def _run_tasks(self, consumer: Consumer, control: ControlClient, deadline: float) -> str:
        """Runs the tasks until the batch ends (``FINISHED``) or the thread's transaction is lost without a
        failure of the application, as Kafka Streams closes a thread's tasks dirty and revives them.
        ``FENCED``: another producer took the slot over, the tasks run elsewhere; the thread ends.
        ``ABORTED``: the transaction could only be aborted (a coordinator loading or moving, a timeout, a
        record's delivery timed out) or its producer stalled; the tasks close without committing (their
        uncommitted store writes dropped) and open again from their last commit, in this thread if the driver
        allows it (``_revive``), else in the next batch. Any other error is raised: the thread fails."""
        while True:
            try:
                self._loop(consumer, control, deadline)
                return FINISHED
            except BaseException as exc:
                if fenced(exc, self.transactions):
                    self._close_tasks(exc, "fenced, its tasks moved")
                    self._close_standbys()
                    control.report({}, FENCED)
                    return FENCED
                if not isinstance(exc, (TransactionAbortableError, TransactionStalledError)) and not (
                        self.transactions is not None and send_timed_out(exc)):
                    raise
                assert self.transactions is not None
                self.transactions.abort_transaction()  # aborted now, read_committed readers go on at once
                tasks = self._close_tasks(exc, "transaction aborted")
                if not self._revive(consumer, control, tasks):
                    self._close_standbys()
                    control.report({}, ABORTED)
                    return ABORTED

    def _close_tasks(self, exc: BaseException, why: str) -> list[str]:
        """Closes the thread's tasks without committing (their uncommitted store writes dropped); returns
        their ids."""
        log.warning("Stream thread %d of %s: %s; closing its %d tasks without committing (they open again "
                    "from their last commit): %s", self.index, self.config.application_id, why,
                    len(self.tasks), exc)
        closed = list(self.tasks)
        for running in self.tasks.values():
            running.open.task.abort()
            running.open.close()
        self.tasks.clear()
        self.routes.clear()
        return closed

    def _revive(self, consumer: Consumer, control: ControlClient, tasks: list[str]) -> bool:
        """Opens ``tasks`` again from their last commit in this thread, with a new producer of its slot, if
        the driver allows it (``ControlClient.may_revive``: this thread's batch still runs, nothing moved).
        The new producer's ``init_transactions`` comes before the driver's last word: tasks move only when a
        new batch begins, and every new batch fences the slot after that, so a thread that was a zombie
        without knowing it (frozen, then thawed) is either refused or fenced, never the slot's legitimate
        holder's fencer with tasks to commit. False when refused, or when the reopening itself loses its
        transaction: the next batch opens the tasks."""
        if not control.may_revive():  # a zombie asks before it fences anything
            return False
        try:
            self._start_producer()
            if not control.may_revive():
                return False
            self._open_all(tasks)
            seed_positions(self.tasks.values())
            consumer.unassign()  # nothing fetched before the abort is handed out again
            self._assign(consumer)
        except (TransactionAbortableError, TransactionStalledError, BrokerUnavailableError) as exc:
            log.warning("Stream thread %d of %s: reopening its tasks failed (%s); the next batch opens them",
                        self.index, self.config.application_id, exc)
            self._close_tasks(exc, "reopening failed")
            return False
        log.info("Stream thread %d of %s: tasks %s open again from their last commit", self.index,
                 self.config.application_id, tasks)
        return True

    # ---- standby tasks ------------------------------------------------------------------------
    def _standbys_held(self) -> dict[str, int]:
        """The standbys this worker holds for this run, with their lag (the assignor's hint)."""
        held = {}
        for task_id in STANDBYS.held(self.config.application_id):
            standby = STANDBYS.peek(self._key(task_id))
            if isinstance(standby, StandbyTask) and standby.run_id == self.plan.run_id:
                held[task_id] = standby.lag
        return held

    def _close_standbys_except(self, standbys: list[str], active: list[str]) -> None:
        """Closes the standbys of this worker that are not to be kept: above all those of tasks that
        become active here (their stores, checkpointed, open at once with only a short tail to replay)."""
        keep = set(standbys) - set(active)
        for task_id in STANDBYS.held(self.config.application_id):
            if task_id not in keep:
                standby = STANDBYS.take(self._key(task_id))
                if standby is not None:
                    standby.close()

    def _open_standbys(self, standbys: list[str]) -> None:
        for task_id in standbys:
            standby = STANDBYS.take(self._key(task_id))
            if isinstance(standby, StandbyTask) and standby.run_id != self.plan.run_id:
                standby.close()
                standby = None
            if standby is None:
                try:
                    standby = StandbyTask(self.topology, self.config, TaskId.parse(task_id), self.plan.run_id)
                except ProcessorStateError as exc:  # the active task runs on this machine after all
                    log.warning("Standby of task %s not opened: %s", task_id, exc)
                    continue
            assert isinstance(standby, StandbyTask)
            self.standbys[task_id] = standby
            self._standby_restored[task_id] = standby.restored

    def _update_standbys(self) -> None:
        for task_id, standby in list(self.standbys.items()):
            if standby.release_requested:  # the active task opens on this machine
                del self.standbys[task_id]
                standby.close()
        update_all(list(self.standbys.values()))

    def _close_standbys(self) -> None:
        for standby in self.standbys.values():
            standby.close()
        self.standbys.clear()

    def _standby_report(self) -> dict[str, dict[str, int]]:
        report = {}
        for task_id, standby in self.standbys.items():
            restored = standby.restored - self._standby_restored[task_id]
            report[task_id] = {"lag": standby.lag, "restored": restored}
            self._standby_restored[task_id] = standby.restored
        return report

    def _key(self, task_id: str) -> tuple[str, str]:
        return (self.config.application_id, task_id)

    # ---- opening ------------------------------------------------------------------------------
    def _open_all(self, assigned: list[str]) -> None:
        """Opens the assigned tasks (or takes them back parked), several at the same time: most of an
        opening is waiting for the broker (committed offsets, the changelogs' ends) and each task has
        its own consumer and stores. A topology with global tables opens them one
        after the other: the process's global stores, shared by its tasks, catch up one task at a time."""
        opened: dict[str, RunningTask] = {}
        failure: BaseException | None = None
        if len(assigned) > 1 and not self.topology.internal.global_stores:
            futures = {task_id: self._background.submit(self._take_up, task_id) for task_id in assigned}
            opened = {task_id: f.result() for task_id, f in futures.items() if f.exception() is None}
            failure = next((f.exception() for f in futures.values() if f.exception() is not None), None)
        else:
            for task_id in assigned:
                try:
                    opened[task_id] = self._take_up(task_id)
                except BaseException as exc:
                    failure = exc
                    break
        if failure is not None:
            for running in opened.values():
                running.open.close()
            raise failure
        for task_id in assigned:
            self.tasks[task_id] = opened[task_id]
            self.routes.update({tp: opened[task_id] for tp in opened[task_id].partitions})

    def _take_up(self, task_id: str) -> RunningTask:
        running = self._reuse(task_id) or self._open(task_id)
        mark("task-open", f"thread {self.index} task {task_id} reused {running.summary.reused}")
        return running

    def _reuse(self, task_id: str) -> RunningTask | None:
        """The task parked in this worker, if it is of this run and the driver says no other thread ran
        it since it parked here (``reusable``: the task's last holder was this worker)."""
        task = PARKED.take(self._key(task_id))
        if task is None:
            return None
        assert isinstance(task, OpenTask)
        if task.run_id != self.plan.run_id or task_id not in self._reusable:
            task.close()
            return None
        try:
            task.refresh_global_stores()
        except BaseException:
            task.close()
            raise
        assert self.producer is not None
        task.sink.use(self.producer)
        return RunningTask(task, self.plan.owned[task_id], reused=True, restored=0)

    def _open(self, task_id: str) -> RunningTask:
        task, restored = self._open_task(task_id)
        return RunningTask(task, self.plan.owned[task_id], reused=False, restored=restored)

    def _open_task(self, task_id: str) -> tuple[OpenTask, int]:
        owned = self.plan.owned[task_id]
        task = OpenTask(self.topology, self.config, TaskId.parse(task_id), owned, self.plan.run_id,
                        self.producer)
        try:
            restored = task.open([(topic, TaskId.parse(task_id).partition) for topic in owned])
        except BaseException:
            task.close()
            raise
        return task, restored

    def _consumer(self) -> Consumer:
        return clients.consumer(
            self.config[cfg.BOOTSTRAP_SERVERS], group_id=self.config.application_id,
            **{**CONNECT_AT_ONCE, **QUICK_RETRY, **self.config.client_props("main.consumer."),
               **LOW_LATENCY_FETCH,
               "isolation.level": "read_committed" if self.config.exactly_once else "read_uncommitted"})

    def _assign(self, consumer: Consumer) -> None:
        clients.assign(consumer, [KafkaTopicPartition(t, p, task.read.get((t, p), OFFSET_BEGINNING))
                                  for (t, p), task in self.routes.items()])

    # ---- the loop -----------------------------------------------------------------------------
    def _loop(self, consumer: Consumer, control: ControlClient, deadline: float) -> None:
        next_commit = time.monotonic() + self.interval_s
        next_standby = time.monotonic()
        first_messages = True
        while True:
            if self.transactions is not None and not self.transactions.in_transaction:
                self.transactions.begin_transaction()
            now = time.monotonic()
            ending = control.stopping.is_set() or now >= deadline
            wait = max(0.0, min(POLL_S, next_commit - now))
            messages = [] if ending else consumer.consume(MAX_POLL_RECORDS, wait)
            if messages:
                if first_messages:
                    mark("first-poll", f"thread {self.index}")
                    first_messages = False
                self._route(messages)
            # caught up with its input (the poll drained the consumer's queue), a thread whose transactions
            # write to many partitions sends what its tasks' caches hold at once: librdkafka's produce
            # requests (one per partition, IN_FLIGHT at a time) then go out while it waits for records,
            # instead of a commit waiting for round after round of them
            send_now = self._wide and len(messages) < MAX_POLL_RECORDS
            for running in self.tasks.values():
                started = time.monotonic()
                if running.open.task.buffered:
                    running.summary.records += running.open.task.process_all()
                    if send_now:
                        running.open.task.prepare_commit()
                running.open.task.maybe_punctuate_system_time()
                running.process_s += time.monotonic() - started
            if ending or time.monotonic() >= next_commit or self._commit_requested():
                # the next commit is due an interval after this one starts, as Kafka Streams schedules
                # them: a record waits at most commit.interval.ms for a commit to start, whatever the
                # commit itself takes
                next_commit = time.monotonic() + self.interval_s
                self._commit_all(consumer)
                self._report(control)
                self._hand_over_released(consumer)
            if self.standbys and not ending and time.monotonic() >= next_standby:
                self._update_standbys()
                next_standby = time.monotonic() + UPDATE_EVERY_S
            if ending:
                return

    def _route(self, messages: list[Message]) -> None:
        """Hands each record to its task's partition buffer; an end-of-partition moves the read
        position past transaction markers (so a caught-up partition commits its end)."""
        batches: dict[tuple[str, int], list[ConsumerRecord]] = {}
        for message in messages:
            error = message.error()
            tp = (message.topic(), message.partition())
            if error is not None:
                self._fetch_error(tp, message, error)
                continue
            records = batches.get(tp)
            if records is None:
                records = batches[tp] = []
            records.append(ConsumerRecord(
                tp[0], tp[1], message.offset(), message.timestamp()[1], message.key(), message.value(),
                tuple(message.headers() or ())))
        for tp, records in batches.items():
            running = self.routes[tp]
            # past the last record, or an end-of-partition the poll also returned (past markers)
            running.read[tp] = max(running.read.get(tp, 0), records[-1].offset + 1)
            running.open.task.add_records(running.partitions[tp], records)

    def _fetch_error(self, tp: tuple[str, int], message: Message, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            running = self.routes.get(tp)
            if running is not None:
                running.read[tp] = max(running.read.get(tp, 0), message.offset())
        elif (refused := refusal(self.config.client_props("main.consumer."), error, topic=tp[0],
                                 group=self.config.application_id)) is not None:
            raise refused
        elif error.fatal() or not error.retriable():
            raise BrokerUnavailableError(f"Reading {tp[0]}-{tp[1]} failed: {error.str()}. Check the broker "
                                         f"at {self.config[cfg.BOOTSTRAP_SERVERS]}.")
        else:
            log.warning("Reading %s-%d: %s (retrying)", tp[0], tp[1], error.str())

    def _commit_requested(self) -> bool:
        return any(running.open.task.commit_requested for running in self.tasks.values())

    def _commit_all(self, consumer: Consumer) -> None:
        """Commits every task that processed, punctuated or moved its read position since the last
        commit, all at once: their caches flushed into the thread's producer, then under exactly-once
        one transaction with every task's offsets, committed after one wait for the acknowledgements (at
        least once: the offsets committed after the outputs are acknowledged); then the stores apply the
        writes. Any failure is raised: a transaction that can only be aborted, or a producer stalled in
        it, ends the thread (``TransactionAbortableError``, ``TransactionStalledError``: see ``run``)."""
        due = [running for running in self.tasks.values() if running.needs_commit()]
        if due:
            self._commit(due, consumer)

    def _commit(self, due: list[RunningTask], consumer: Consumer) -> None:
        started = time.monotonic()
        uncommitted = [(running, running.uncommitted()) for running in due]
        if self.transactions is not None:
            self._commit_transaction(uncommitted, consumer)
        else:
            for running in due:
                running.open.task.prepare_commit()
            self._flush()
            offsets = self._offsets(uncommitted)
            if offsets:
                self._commit_offsets(consumer, offsets)
        for running, task_offsets in uncommitted:
            running.open.task.post_commit()
            running.open.positions.update(task_offsets)
            running.committed()
        self._note_width()
        share = (time.monotonic() - started) / len(due)
        for running in due:
            running.commit_s += share

    def _commit_transaction(self, uncommitted: list[tuple[RunningTask, Offsets]], consumer: Consumer) -> None:
        """The offsets go into the transaction while the tasks flush their caches and the records are
        acknowledged: the two round trips of ``send_offsets_to_transaction`` (AddOffsetsToTxn,
        TxnOffsetCommit) overlap the flush's CPU and the produce requests (one per partition, at most
        5 at a time). Sent again, should the flush have changed the metadata of an offset (a processor's
        metadata, written by a processor downstream of a cache). The order of records and offsets in a
        transaction does not matter: ``commit_transaction`` makes them visible together."""
        assert self.transactions is not None
        offsets = self._offsets(uncommitted)
        group = consumer.consumer_group_metadata()
        sending = self._background.submit(self._send_offsets, offsets, group) if offsets else None
        try:
            for running, _ in uncommitted:
                running.open.task.prepare_commit()
        except BaseException as exc:
            if sending is not None:
                wait([sending])  # the transaction is aborted next: no call of it may still be running
                failure = sending.exception()
                if failure is not None:  # the cause: a fenced or abortable transaction refuses records
                    raise failure from exc
            raise
        if sending is not None:
            sending.result()
        flushed = self._offsets(uncommitted)
        if [tp.metadata for tp in flushed] != [tp.metadata for tp in offsets]:
            self._send_offsets(flushed, group)
        self._flush()
        self.transactions.commit_transaction()

    def _send_offsets(self, offsets: list[KafkaTopicPartition], group: Any) -> None:
        assert self.transactions is not None
        self.transactions.send_offsets_to_transaction(offsets, group)

    @staticmethod
    def _offsets(uncommitted: list[tuple[RunningTask, Offsets]]) -> list[KafkaTopicPartition]:
        """The tasks' offsets to commit, each with its partition's time (and processor metadata)."""
        return [tp for running, task_offsets in uncommitted
                for tp in running.open.with_metadata(task_offsets)]

    def _note_width(self) -> None:
        """Whether the transaction just committed wrote to more partitions than ``IN_FLIGHT``."""
        written = [running.open.sink.written() for running in self.tasks.values()]
        self._wide = len(set().union(*written)) > IN_FLIGHT

    def _commit_offsets(self, consumer: Consumer, offsets: list[KafkaTopicPartition]) -> None:
        """At least once: the offsets committed once the outputs are acknowledged."""
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"Stream thread {self.index} failed to commit its offsets: {exc.args[0].str()}. Check "
                f"the broker at {self.config[cfg.BOOTSTRAP_SERVERS]}.") from exc

    def _flush(self) -> None:
        """Waits until the broker acknowledged every record the thread's tasks sent; a failed send fails
        its task's commit (``RecordCollector.check_error``, through the task's production handler)."""
        if self.transactions is not None:
            remaining = self.transactions.flush(FLUSH_TIMEOUT_S)
        else:
            assert self.producer is not None
            remaining = self.producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            unacknowledged = f"Stream thread {self.index}: {remaining} records not acknowledged in " \
                             f"{FLUSH_TIMEOUT_S:.0f}s"
            if self.transactions is not None:
                self.transactions.abort_transaction()
                raise TransactionAbortableError(f"{unacknowledged}; the transaction was aborted.")
            raise BrokerUnavailableError(f"{unacknowledged}. Check the broker at "
                                         f"{self.config[cfg.BOOTSTRAP_SERVERS]}.")
        for running in self.tasks.values():
            running.open.task.collector.check_error()

    def _hand_over_released(self, consumer: Consumer) -> None:
        """Closes the tasks another process asked for (their lease's release request), right after
        their commit: a retry of this thread's Spark task on this machine takes them over at once
        instead of waiting for this batch to end."""
        for task_id, running in list(self.tasks.items()):
            if running.open.release_requested:
                log.info("Task %s: handed over to another process on its request", running.open.name)
                consumer.incremental_unassign([KafkaTopicPartition(t, p) for t, p in running.partitions])
                for tp in running.partitions:
                    del self.routes[tp]
                del self.tasks[task_id]
                running.open.close()

    def _report(self, control: ControlClient, state: str = "RUNNING") -> None:
        deltas = {task_id: running.progress_delta() for task_id, running in self.tasks.items()}
        control.report({task_id: delta for task_id, delta in deltas.items() if any(delta.values())}, state,
                       self._standby_report())

    def _abort_all(self) -> None:
        """The thread fails: its transaction is aborted, every task drops its uncommitted writes."""
        if self.transactions is not None:
            self.transactions.abort_transaction()
        for running in self.tasks.values():
            running.open.abort()
            running.open.close()
        self.tasks.clear()


class StreamThreadRunner:
    """The function given to ``mapInArrow`` over ``spark.range(threads)``: each row is a thread index."""

    def __init__(self, topology: Topology, props: dict[str, Any], plan: ThreadPlan) -> None:
        self.topology = topology
        self.props = props
        self.plan = plan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        config = executor_config(self.props)
        for batch in batches:
            for index in batch.column(0).to_pylist():
                summaries = StreamThread(self.topology, config, self.plan, int(index)).run()
                if summaries:
                    yield pa.RecordBatch.from_pylist([s.__dict__ for s in summaries],
                                                     schema=SUMMARY_SCHEMA)
