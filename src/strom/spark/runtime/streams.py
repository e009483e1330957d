"""SparkStreams: Kafka Streams' ``KafkaStreams`` for Spark.

Each sub-topology runs as one Spark streaming query: the source plans one input partition per
stream task (``strom-stream-tasks``), ``mapInArrow`` runs the stream task in the same Spark task
(no shuffle), and ``foreachBatch`` collects one summary row per task for the progress figures.
The trigger interval is ``commit.interval.ms``: every micro-batch ends in a commit.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from strom.errors import ConfigError, ProcessingError
from strom.kafka import clients
from strom.spark.metadata import TopicMetadata
from strom.spark.runtime.executor import SUMMARY_DDL, StreamTaskRunner
from strom.spark.runtime.plan import (
    ApplicationPlan,
    SubtopologyTasks,
    check_tasks_build,
    create_internal_topics,
    plan_application,
)
from strom.spark.runtime.source import FORMAT, PLAN_OPTION, SourcePlan, StreamTaskSource, committed_offsets
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig
from strom.streams.processor.topology import Topology

log = logging.getLogger(__name__)

MAX_OFFSETS_PER_TRIGGER = "max.offsets.per.trigger"
_STOP_WAIT_S = 60.0
_MAX_RESTARTS = 5
_TRANSIENT = ("failed to connect back", "CANNOT_OPEN_SOCKET")


def _positive(key: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError.bad_value(key, value, "a positive integer") from None
    if number <= 0:
        raise ConfigError.bad_value(key, value, "a positive integer")
    return number


cfg.register(MAX_OFFSETS_PER_TRIGGER, 100_000, _positive)


@dataclass
class TaskProgress:
    """What one stream task has done in this run."""

    batches: int = 0
    records: int = 0
    output: int = 0
    restored: int = 0
    skipped: int = 0
    millis: float = 0.0


@dataclass
class StreamsProgress:
    """Per task totals since ``start()``; ``records`` counts input records processed."""

    tasks: dict[str, TaskProgress] = field(default_factory=dict)
    batches: dict[int, int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(t.records for t in self.tasks.values())

    @property
    def output(self) -> int:
        return sum(t.output for t in self.tasks.values())


class SparkStreams:
    """Runs a topology on Spark: ``start()``, ``await_termination()``, ``stop()``, ``progress``.

    ``props`` are StreamsConfig keys; ``bootstrap.servers`` and ``application.id`` are required.
    Without ``spark`` a local session is built with ``strom.spark.session()``.
    """

    def __init__(self, topology: Topology, props: Mapping[str, Any],
                 spark: SparkSession | None = None) -> None:
        self.config = StreamsConfig(props)
        if not self.config.get(cfg.BOOTSTRAP_SERVERS):
            raise ConfigError("Missing 'bootstrap.servers': SparkStreams needs the Kafka brokers, e.g. "
                              "{'bootstrap.servers': 'localhost:9092'}.")
        self._props = dict(props)
        self._topology = topology
        self._spark = spark
        self._queries: dict[int, StreamingQuery] = {}
        self._lock = threading.Lock()
        self.progress = StreamsProgress()
        self.plan: ApplicationPlan | None = None
        self._restarts = 0

    @property
    def bootstrap_servers(self) -> str:
        return self.config[cfg.BOOTSTRAP_SERVERS]

    @property
    def _app_dir(self) -> Path:
        return Path(self.config[cfg.STATE_DIR]) / self.config.application_id

    @property
    def _stop_file(self) -> Path:
        return self._app_dir / "stopping"

    def start(self) -> None:
        """Plans tasks (co-partitioning checked), creates internal topics, starts one query per
        sub-topology. Queries resume from the committed offsets of group ``application.id``."""
        if self._queries:
            raise ConfigError("This SparkStreams is already started; stop() it before starting again.")
        admin = clients.admin(self.bootstrap_servers)
        self.plan = plan_application(self._topology, self.config, admin)
        check_tasks_build(self._topology, self.config)
        created = create_internal_topics(self.plan, admin, self.bootstrap_servers)
        log.info("Application %s: tasks %s, created internal topics %s", self.config.application_id,
                 self.plan.task_ids, created)
        spark = self._spark = self._spark or self._default_session()
        spark.dataSource.register(StreamTaskSource)
        self._app_dir.mkdir(parents=True, exist_ok=True)
        self._stop_file.unlink(missing_ok=True)
        try:
            for sub in self.plan.subtopologies:
                self._queries[sub.id] = self._start_initialized(spark, sub)
        except BaseException:
            self.stop()
            raise

    def _start_initialized(self, spark: SparkSession, sub: SubtopologyTasks) -> StreamingQuery:
        """Starts a query and waits for its first trigger, so queries start one after the other:
        Spark gives each new Python source process a fixed 10 s to connect back."""
        query = self._start_query(spark, sub)
        deadline = time.monotonic() + _STOP_WAIT_S
        while query.isActive and query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return query

    def _default_session(self) -> SparkSession:
        import strom.spark

        self._spark = strom.spark.session(app_name=f"strom-{self.config.application_id}")
        return self._spark

    def _source_plan(self, sub: SubtopologyTasks) -> SourcePlan:
        return SourcePlan(self.bootstrap_servers, self.config.application_id, sub.id, dict(sub.source_topics),
                          self.config[MAX_OFFSETS_PER_TRIGGER], self.config.client_props("consumer."),
                          str(self._stop_file))

    def _start_query(self, spark: SparkSession, sub: SubtopologyTasks) -> StreamingQuery:
        checkpoint = self._app_dir / "spark-checkpoints" / str(sub.id)
        shutil.rmtree(checkpoint, ignore_errors=True)  # committed Kafka offsets say where to resume
        source = (spark.readStream.format(FORMAT)
                  .option(PLAN_OPTION, self._source_plan(sub).to_json())
                  .load())
        summaries = source.mapInArrow(StreamTaskRunner(self._topology, self._props), SUMMARY_DDL)
        return (summaries.writeStream
                .queryName(f"{self.config.application_id}-subtopology-{sub.id}")
                .foreachBatch(self._batch_handler(sub.id))
                .trigger(processingTime=f"{self.config[cfg.COMMIT_INTERVAL_MS]} milliseconds")
                .option("checkpointLocation", str(checkpoint))
                .start())

    def _batch_handler(self, sub_id: int):
        def handle(df: DataFrame, batch_id: int) -> None:
            rows = df.collect()
            with self._lock:
                self.progress.batches[sub_id] = self.progress.batches.get(sub_id, 0) + 1
                for row in rows:
                    task = self.progress.tasks.setdefault(row["task"], TaskProgress())
                    task.batches += 1
                    task.records += row["records"]
                    task.output += row["output"]
                    task.restored += row["restored"]
                    task.skipped += int(row["skipped"])
                    task.millis += row["millis"]

        return handle

    def lag(self) -> int:
        """Records in the source topics (committed data) that the application has not committed yet."""
        if self.plan is None:
            raise ConfigError("Call start() first.")
        behind = 0
        for sub in self.plan.subtopologies:
            source = self._source_plan(sub)
            partitions = [(t, p) for t, n in sub.source_topics.items() for p in range(n)]
            latest = TopicMetadata(source.source_options()).latest(partitions)
            committed = committed_offsets(source, partitions)
            behind += sum(max(0, end - committed.get(tp, 0)) for tp, end in latest.items())
        return behind

    def wait_until_caught_up(self, timeout: float) -> bool:
        """Waits until every source partition is committed up to its end (sub-topologies in order,
        so records a sub-topology wrote to a repartition topic are counted); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._raise_if_failed()
            if self.lag() == 0:
                return True
            time.sleep(0.2)
        return False

    def await_termination(self, timeout: float | None = None) -> bool:
        """Blocks until the queries stop (True) or ``timeout`` seconds pass (False); a query that
        failed raises ProcessingError with Spark's message."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while any(q.isActive for q in self._queries.values()):
            self._raise_if_failed()
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        self._raise_if_failed()
        return True

    def _raise_if_failed(self) -> None:
        """Raises the first query failure; a query whose Python worker could not start (a busy
        machine missing Spark's fixed connect-back timeout) is restarted instead, a few times:
        nothing it did is lost, it resumes from the committed offsets."""
        for sub_id, query in list(self._queries.items()):
            error = query.exception()
            if error is None:
                continue
            transient = any(marker in str(error) for marker in _TRANSIENT)
            if transient and self._restarts < _MAX_RESTARTS and self.plan is not None:
                self._restarts += 1
                log.warning("Sub-topology %d: a Spark Python worker did not start in time; restarting "
                            "its query (%d/%d)", sub_id, self._restarts, _MAX_RESTARTS)
                sub = next(s for s in self.plan.subtopologies if s.id == sub_id)
                self._queries[sub_id] = self._start_initialized(self._spark, sub)
                continue
            raise ProcessingError(f"Sub-topology {sub_id} of {self.config.application_id} failed: "
                                  f"{error}") from error

    def stop(self) -> None:
        """Stops planning new micro-batches, lets running ones commit, then stops the queries."""
        if not self._queries:
            return
        self._stop_file.touch()
        deadline = time.monotonic() + _STOP_WAIT_S
        idle_since: float | None = None
        interval = self.config[cfg.COMMIT_INTERVAL_MS] / 1000
        while time.monotonic() < deadline:
            busy = any(q.isActive and q.status["isTriggerActive"] for q in self._queries.values())
            now = time.monotonic()
            if busy:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since > max(0.5, 2 * interval):
                break
            time.sleep(0.05)
        for query in self._queries.values():
            query.stop()
        self._queries.clear()
        self._stop_file.unlink(missing_ok=True)

    def __enter__(self) -> SparkStreams:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
