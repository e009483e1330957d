"""Micro-batch mode, executor side: one Spark task runs one stream task for one micro-batch.

``processing.guarantee=exactly_once_v2``:

1. a transactional producer ``transactional.id=<application.id>-<task>`` calls
   ``init_transactions()``, fencing earlier or speculative attempts of the task;
2. the committed offsets of group ``<application.id>`` decide: ranges they already reach were
   processed before (a replay) and are skipped; records below them are dropped; their metadata
   (partition times) restores the task's stream time;
3. the stores are restored to the end of their changelogs (read_committed);
4. in one transaction: process depth-first, flush caches (changelog, repartition and output
   records), send the end offsets with the partition times as metadata
   (``send_offsets_to_transaction``), commit; a reused task sends the end offsets once before
   processing too, so a fence since its last batch shows before any record is processed;
5. only then the stores apply the batch's writes and the new checkpoint (``post_commit``); a
   failure before leaves them at the previous checkpoint.

Steps 1-3 open the task (``OpenTask``); after the commit the task stays open in this Python
worker (``PARKED``). The task's next batch reuses it when it lands in the same worker of the same
run and starts exactly at the offsets the task committed; its producer is then still the current
one unless another attempt fenced it, which step 4 finds before processing: the task is closed
and opened again from the committed offsets and the local checkpoint.

``at_least_once``: an idempotent producer; offsets (with the partition times) are committed after
the outputs are acknowledged, then the stores commit.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strom.spark.runtime.executor import TaskSummary, executor_config
from strom.spark.runtime.open_task import Offsets, OpenTask
from strom.spark.runtime.parked import PARKED
from strom.streams.config import StreamsConfig
from strom.streams.processor.records import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.topology import Topology

__all__ = ["BatchPlan", "Range", "StreamTaskRunner", "TaskAttempt", "consumer_records"]

log = logging.getLogger(__name__)

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


class StreamTaskRunner:
    """The function given to ``mapInArrow``: reads the plan row, runs the task, yields a summary.

    ``run_id`` names one ``SparkStreams.start()``: open tasks are reused only within it.
    """

    def __init__(self, topology: Topology, props: dict[str, Any], run_id: str) -> None:
        self.topology = topology
        self.props = props
        self.run_id = run_id

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = (b for b in batches if b.num_rows)
        first = next(batches, None)
        if first is None:
            return
        plan = BatchPlan.from_json(first.column("value")[0].as_py())
        rest = _chain(first.slice(1), batches)
        summary = TaskAttempt(self.topology, executor_config(self.props), plan, self.run_id).run(rest)
        yield summary.to_arrow()


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if first.num_rows:
        yield first
    yield from rest


class TaskAttempt:
    """One attempt of one stream task over one micro-batch, with the configured guarantee."""

    def __init__(self, topology: Topology, config: StreamsConfig, plan: BatchPlan, run_id: str) -> None:
        self.topology = topology
        self.config = config
        self.plan = plan
        self.run_id = run_id
        self.key = (config.application_id, str(plan.task_id))

    def run(self, batches: Iterator[pa.RecordBatch]) -> TaskSummary:
        started = time.monotonic()
        summary = TaskSummary(str(self.plan.task_id))
        task = self._reuse()
        summary.reused = task is not None
        if task is None:
            task = self._open(summary)
        try:
            pending = {(r.topic, r.partition): r.end for r in self.plan.ranges
                       if task.positions.get((r.topic, r.partition), -1) < r.end}
            if pending:
                if not summary.reused:
                    task.begin()
                self._process(task, batches, pending, summary)
            else:
                log.info("Task %s: batch already committed (a replay); skipping it", task.name)
                summary.skipped = True
        except BaseException:
            task.close()
            raise
        PARKED.park(self.key, task)
        summary.millis = (time.monotonic() - started) * 1000
        return summary

    def _reuse(self) -> OpenTask | None:
        """The task parked in this worker if the batch starts where it stands and its producer is
        still current (the batch's transaction is begun then); None otherwise."""
        task = PARKED.take(self.key)
        if task is None:
            return None
        assert isinstance(task, OpenTask)
        if task.run_id != self.run_id or any(task.positions.get((r.topic, r.partition)) != r.start
                                             for r in self.plan.ranges):
            task.close()
            return None
        ends = {(r.topic, r.partition): r.end for r in self.plan.ranges}
        return task if task.resume(fencing_probe=ends) else None

    def _open(self, summary: TaskSummary) -> OpenTask:
        task = OpenTask(self.topology, self.config, self.plan.task_id, self.plan.owned, self.run_id,
                        patient=True)
        try:
            summary.restored = task.open([(r.topic, r.partition) for r in self.plan.ranges])
        except BaseException:
            task.close()
            raise
        return task

    def _process(self, task: OpenTask, batches: Iterator[pa.RecordBatch], ends: Offsets,
                 summary: TaskSummary) -> None:
        """Processes the batch in the begun transaction and commits; aborts on failure."""
        stream_task = task.task
        sent_before = dict(task.sink.sent)
        try:
            summary.records = self._feed(stream_task, batches, task.positions)
            stream_task.maybe_punctuate_system_time()
            stream_task.prepare_commit()
            task.commit(ends)
        except BaseException:
            task.abort()
            raise
        stream_task.post_commit()
        changelogs = {tp.topic for tp in stream_task.changelog_partitions().values()}
        summary.output = sum(n - sent_before.get(topic, 0) for topic, n in task.sink.sent.items()
                             if topic not in changelogs)

    def _feed(self, task: Any, batches: Iterator[pa.RecordBatch], committed: Offsets) -> int:
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


def consumer_records(batch: pa.RecordBatch, committed: dict[tuple[str, int], int]
                     ) -> dict[TopicPartition, list[ConsumerRecord]]:
    """Arrow rows (Spark's Kafka schema) → raw records per partition, dropping offsets already
    committed. Rows come in runs of one partition: the partition's list and floor are looked up per run."""
    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()
    micros = batch.column("timestamp").cast(pa.int64()).fill_null(-1000).to_numpy()
    timestamps = (micros // 1000).tolist()
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    headers = batch.column("headers").to_pylist()
    out: dict[TopicPartition, list[ConsumerRecord]] = {}
    run_topic, run_partition, floor, append = None, None, 0, None
    for topic, partition, offset, timestamp, key, value, header in zip(
            topics, partitions, offsets, timestamps, keys, values, headers, strict=True):
        if partition != run_partition or topic != run_topic:
            run_topic, run_partition = topic, partition
            floor = committed.get((topic, partition), 0)
            append = out.setdefault(TopicPartition(topic, partition), []).append
        if offset < floor:
            continue
        append(ConsumerRecord(topic, partition, offset, timestamp, key, value,  # type: ignore[misc]
                              tuple((h["key"], h["value"]) for h in header) if header else ()))
    return {tp: records for tp, records in out.items() if records}
