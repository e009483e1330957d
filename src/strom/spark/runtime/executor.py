"""Executor side: one Spark task runs one stream task for one micro-batch.

``processing.guarantee=exactly_once_v2`` (ARCHITECTURE.md, "Exactly-once on Spark"):

1. a transactional producer ``transactional.id=<application.id>-<task>`` calls
   ``init_transactions()``, fencing earlier or speculative attempts of the task;
2. the committed offsets of group ``<application.id>`` decide: ranges they already reach were
   processed before (a replay) and are skipped; records below them are dropped;
3. the stores are restored to the end of their changelogs (read_committed);
4. in one transaction: process depth-first, flush caches (changelog, repartition and output
   records), ``send_offsets_to_transaction`` with the batch's end offsets, commit;
5. only then the stores apply the batch's writes and the new checkpoint (``post_commit``); a
   failure before leaves them at the previous checkpoint.

``at_least_once``: an idempotent producer; offsets are committed after the outputs are
acknowledged, then the stores commit.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.errors import BrokerUnavailableError, ProducerFencedError
from strom.kafka import clients
from strom.spark.runtime.producer_sink import ProducerSink
from strom.spark.runtime.restore import restore_task
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig
from strom.streams.processor.internals.records import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.internals.task import StreamTask
from strom.streams.processor.topology import Topology
from strom.streams.state.cache import ThreadCache

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

SUMMARY_SCHEMA = pa.schema([
    ("task", pa.string()),
    ("records", pa.int64()),
    ("output", pa.int64()),
    ("restored", pa.int64()),
    ("skipped", pa.bool_()),
    ("millis", pa.float64()),
])
SUMMARY_DDL = "task string, records long, output long, restored long, skipped boolean, millis double"


@dataclass(frozen=True)
class Range:
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class BatchPlan:
    """What the plan row of a task's input says: the task, its partitions, the batch's ranges."""

    task_id: TaskId
    owned: tuple[str, ...]
    ranges: tuple[Range, ...]

    @classmethod
    def from_json(cls, raw: bytes) -> BatchPlan:
        plan = json.loads(raw)
        return cls(TaskId(plan["subtopology"], plan["partition"]), tuple(plan["owned"]),
                   tuple(Range(*r) for r in plan["ranges"]))


@dataclass
class TaskSummary:
    task: str
    records: int = 0
    output: int = 0
    restored: int = 0
    skipped: bool = False
    millis: float = 0.0

    def to_arrow(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([self.__dict__], schema=SUMMARY_SCHEMA)


class StreamTaskRunner:
    """The function given to ``mapInArrow``: reads the plan row, runs the task, yields a summary."""

    def __init__(self, topology: Topology, props: dict[str, Any]) -> None:
        self.topology = topology
        self.props = props

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = (b for b in batches if b.num_rows)
        first = next(batches, None)
        if first is None:
            return
        plan = BatchPlan.from_json(first.column("value")[0].as_py())
        rest = _chain(first.slice(1), batches)
        summary = TaskAttempt(self.topology, StreamsConfig(self.props), plan).run(rest)
        yield summary.to_arrow()


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if first.num_rows:
        yield first
    yield from rest


class TaskAttempt:
    """One attempt of one stream task over one micro-batch, with the configured guarantee."""

    def __init__(self, topology: Topology, config: StreamsConfig, plan: BatchPlan) -> None:
        self.topology = topology
        self.config = config
        self.plan = plan
        self.eos = config.exactly_once
        self.name = f"{config.application_id}-{plan.task_id}"
        bootstrap = config[cfg.BOOTSTRAP_SERVERS]
        producer_config = {**QUICK_RETRY, **config.client_props("producer.")}
        if self.eos:
            producer_config["transactional.id"] = self.name
        self.sink = ProducerSink(bootstrap, producer_config)
        self.consumer: Consumer = clients.consumer(
            bootstrap, group_id=config.application_id,
            **{**QUICK_RETRY, **config.client_props("consumer."), "enable.partition.eof": True, **QUICK_EOF,
               "isolation.level": "read_committed" if self.eos else "read_uncommitted"})

    def run(self, batches: Iterator[pa.RecordBatch]) -> TaskSummary:
        started = time.monotonic()
        summary = TaskSummary(str(self.plan.task_id))
        try:
            if self.eos:
                self._call(self.sink.producer.init_transactions, TIMEOUT_S)
            committed = self._committed()
            pending = [r for r in self.plan.ranges if committed.get((r.topic, r.partition), -1) < r.end]
            if not pending:
                log.info("Task %s: batch already committed (a replay); skipping it", self.name)
                summary.skipped = True
            else:
                self._run_task(batches, committed, pending, summary)
        finally:
            self.consumer.close()
            self.sink.close()
        summary.millis = (time.monotonic() - started) * 1000
        return summary

    def _run_task(self, batches: Iterator[pa.RecordBatch], committed: dict[tuple[str, int], int],
                  pending: list[Range], summary: TaskSummary) -> None:
        task = StreamTask(self.plan.task_id, self.topology.internal, self.config, self.sink,
                          ThreadCache(self.config[cfg.STATESTORE_CACHE_MAX_BYTES]),
                          partitions=[TopicPartition(t, self.plan.task_id.partition)
                                      for t in self.plan.owned])
        try:
            task.initialize()
            summary.restored = restore_task(task, self.consumer)
            task.complete_restoration()
            try:
                if self.eos:
                    self._call(self.sink.producer.begin_transaction)
                summary.records = self._process(task, batches, committed)
                task.maybe_punctuate_system_time()
                task.prepare_commit()
                self._commit([KafkaTopicPartition(r.topic, r.partition, r.end) for r in pending])
            except BaseException:
                self._abort(task)
                raise
            task.post_commit()
            changelogs = {tp.topic for tp in task.changelog_partitions().values()}
            summary.output = sum(n for topic, n in self.sink.sent.items() if topic not in changelogs)
        finally:
            task.close()

    def _process(self, task: StreamTask, batches: Iterator[pa.RecordBatch],
                 committed: dict[tuple[str, int], int]) -> int:
        """Feeds the batch's records; a task with one partition processes as they arrive, a task
        with several buffers them all first so it can pick the next record by timestamp."""
        incremental = len(self.plan.owned) == 1
        processed = 0
        for batch in batches:
            for tp, records in consumer_records(batch, committed).items():
                task.add_records(tp, records)
            if incremental:
                processed += task.process_all()
        return processed + task.process_all()

    def _committed(self) -> dict[tuple[str, int], int]:
        partitions = [KafkaTopicPartition(r.topic, r.partition) for r in self.plan.ranges]
        result = self._call(self.consumer.committed, partitions, TIMEOUT_S)
        return {(tp.topic, tp.partition): tp.offset for tp in result if tp.offset != _NO_OFFSET}

    def _commit(self, offsets: list[KafkaTopicPartition]) -> None:
        producer = self.sink.producer
        if self.eos:
            self._call(producer.send_offsets_to_transaction, offsets,
                       self.consumer.consumer_group_metadata(), TIMEOUT_S)
            self._call(producer.commit_transaction, TIMEOUT_S)
        else:
            self._call(self.consumer.commit, offsets=offsets, asynchronous=False)

    def _abort(self, task: StreamTask) -> None:
        if self.eos:
            try:
                self.sink.producer.abort_transaction(TIMEOUT_S)
            except KafkaException as exc:
                log.warning("Task %s: abort_transaction failed (%s); the next attempt's "
                            "init_transactions aborts it", self.name, exc)
        task.abort()

    def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                KafkaError.INVALID_PRODUCER_EPOCH):
                raise ProducerFencedError(f"Stream task {self.name} was fenced in {method.__name__}: another "
                                  "attempt of the same task took over. Spark retries the task.") from exc
            raise BrokerUnavailableError(
                f"Stream task {self.name} failed in {method.__name__}: {error.str()}. Check the broker "
                f"at {self.config[cfg.BOOTSTRAP_SERVERS]}.") from exc


def consumer_records(batch: pa.RecordBatch, committed: dict[tuple[str, int], int]
                     ) -> dict[TopicPartition, list[ConsumerRecord]]:
    """Arrow rows (Spark's Kafka schema) → raw records per partition, dropping offsets already
    committed."""
    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()
    micros = batch.column("timestamp").cast(pa.int64()).fill_null(-1000).to_numpy()
    timestamps = (micros // 1000).tolist()
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    headers = batch.column("headers").to_pylist()
    out: dict[TopicPartition, list[ConsumerRecord]] = {}
    for topic, partition, offset, timestamp, key, value, header in zip(
            topics, partitions, offsets, timestamps, keys, values, headers, strict=True):
        if offset < committed.get((topic, partition), 0):
            continue
        record = ConsumerRecord(topic, partition, offset, timestamp, key, value,
                                tuple((h["key"], h["value"]) for h in header) if header else ())
        tp = TopicPartition(topic, partition)
        records = out.get(tp)
        if records is None:
            records = out[tp] = []
        records.append(record)
    return out

