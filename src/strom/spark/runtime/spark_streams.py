"""SparkStreams: Kafka Streams' ``KafkaStreams`` for Spark.

Two ways to execute the stream tasks (``execution.mode``): ``realtime`` (the default), long-running
Spark tasks that are Kafka Streams stream threads, each consuming, processing and committing its
tasks continuously (``strom.spark.runtime.realtime``); or ``microbatch``, one Spark streaming
micro-batch per commit (``strom.spark.runtime.microbatch``). Everything else (planning, internal
topics, offsets and lag, interactive queries, state, failure handling) is shared.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from pyspark.sql import SparkSession

from strom.errors import ConfigError, InvalidStateStoreError, ProcessingError, ProcessorStateError
from strom.kafka import clients
from strom.kafka.instances import ApplicationInstance
from strom.prometheus import MetricsServer
from strom.spark import failure_policy, metrics, quiet_logging
from strom.spark.connector.metadata import TopicMetadata
from strom.spark.queries import http as query_http
from strom.spark.queries.router import QueryRouter
from strom.spark.queries.views import remote_view
from strom.spark.runtime.control import ThreadMetadata
from strom.spark.runtime.lease import TaskLease
from strom.spark.runtime.microbatch import MicroBatchExecution
from strom.spark.runtime.microbatch_source import CommittedOffsets, SourcePlan
from strom.spark.runtime.plan import (
    ApplicationPlan,
    check_tasks_build,
    create_internal_topics,
    plan_application,
)
from strom.spark.runtime.realtime import RealtimeExecution, stream_threads
from strom.spark.runtime.store_copies import StoreCopies
from strom.spark.startup import mark
from strom.streams import config as cfg
from strom.streams.config import (  # the runtime's keys, defined with every other key
    ACCEPTABLE_RECOVERY_LAG,
    EXECUTION_MODE,
    MAX_OFFSETS_PER_TRIGGER,
    NUM_STANDBY_REPLICAS,
    NUM_STREAM_THREADS,
    REALTIME,
    REALTIME_BATCH_DURATION_MS,
    StreamsConfig,
)
from strom.streams.processor.internals.context import default_serde
from strom.streams.processor.topology import Topology
from strom.streams.query import KeyQueryMetadata, StateQueryRequest, StateQueryResult, StoreQueryParameters
from strom.streams.query.requests import StreamsMetadata

__all__ = [
    "ACCEPTABLE_RECOVERY_LAG",
    "EXECUTION_MODE",
    "MAX_OFFSETS_PER_TRIGGER",
    "NUM_STANDBY_REPLICAS",
    "NUM_STREAM_THREADS",
    "REALTIME_BATCH_DURATION_MS",
    "Execution",
    "SparkStreams",
    "StandbyProgress",
    "State",
    "StateListener",
    "StreamThreadExceptionResponse",
    "StreamsProgress",
    "TaskProgress",
    "UncaughtExceptionHandler",
]

log = logging.getLogger(__name__)

_RELEASE_WAIT_S = 10.0
_MAX_RESTARTS = 5
# Failures of Spark's machinery, not of the application: the run starts again from the committed
# offsets (a Python worker that missed Spark's connect-back timeout on a busy machine, or one that
# was killed, as a Spark cluster would retry the task on another executor).
_TRANSIENT = ("failed to connect back", "CANNOT_OPEN_SOCKET", "Python worker exited unexpectedly")


@dataclass
class TaskProgress:
    """What one stream task has done in this run."""

    batches: int = 0
    records: int = 0
    output: int = 0
    restored: int = 0
    skipped: int = 0
    reused: int = 0
    commits: int = 0
    millis: float = 0.0
    """Micro-batch: time of the task's batches; real-time: time processing records and punctuating."""
    commit_millis: float = 0.0
    """Real-time: time committing (caches flushed, transaction committed, stores written)."""


@dataclass
class StandbyProgress:
    """One standby replica of a task as its thread last reported it."""

    task: str
    thread: str
    lag: int = -1
    """Changelog records (and commit markers) it had not applied at its last update; -1: none yet."""
    restored: int = 0
    """Changelog records it applied in this run."""


@dataclass
class StreamsProgress:
    """Per task totals since ``start()``; ``records`` counts input records processed. In real-time
    mode the figures move at every commit of a task; in micro-batch mode at the end of each batch."""

    tasks: dict[str, TaskProgress] = field(default_factory=dict)
    standbys: dict[str, StandbyProgress] = field(default_factory=dict)
    """Real-time mode with ``num.standby.replicas``: per ``"<task>@<thread>"``, a standby replica."""
    batches: int = 0
    batch_finished: list[float] = field(default_factory=list)
    """``time.monotonic()`` when each batch finished: the first includes Spark's warm-up."""
    last_commit: float | None = None
    """``time.monotonic()`` of the last commit any task reported."""

    def add(self, task: str, counters: Mapping[str, float]) -> None:
        progress = self.tasks.setdefault(task, TaskProgress())
        for name, value in counters.items():
            setattr(progress, name, getattr(progress, name) + value)
        if counters.get("commits"):
            self.last_commit = time.monotonic()

    @property
    def records(self) -> int:
        return sum(t.records for t in self.tasks.values())

    @property
    def output(self) -> int:
        return sum(t.output for t in self.tasks.values())

    @property
    def reused(self) -> int:
        """Task batches that ran on a task kept open since its previous batch."""
        return sum(t.reused for t in self.tasks.values())


class State(Enum):
    """Kafka's ``KafkaStreams.State``, the states an application on Spark goes through."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    ERROR = "ERROR"


StateListener = Callable[[State, State], None]
"""Called with (new state, old state), as Kafka's ``KafkaStreams.StateListener.onChange``."""


class StreamThreadExceptionResponse(Enum):
    """What an uncaught exception handler answers (Kafka's ``StreamsUncaughtExceptionHandler``):
    REPLACE_THREAD restarts the query, which resumes from the committed offsets (nothing is lost or
    written twice under exactly-once); SHUTDOWN_CLIENT and SHUTDOWN_APPLICATION end it in ERROR."""

    REPLACE_THREAD = "REPLACE_THREAD"
    SHUTDOWN_CLIENT = "SHUTDOWN_CLIENT"
    SHUTDOWN_APPLICATION = "SHUTDOWN_APPLICATION"


UncaughtExceptionHandler = Callable[[Exception], StreamThreadExceptionResponse]


class Execution(Protocol):
    """How the stream tasks run on Spark: ``MicroBatchExecution`` or ``RealtimeExecution``."""

    @property
    def is_active(self) -> bool: ...

    def exception(self) -> Exception | None: ...

    def stop(self) -> None: ...


class SparkStreams:
    """Runs a topology on Spark: ``start()``, ``await_termination()``, ``stop()``, ``progress``,
    ``state``; as a context manager it starts, and stops on exit.

    ``props`` are StreamsConfig keys; ``bootstrap.servers`` and ``application.id`` are required.
    Without ``spark`` a local session is built with ``strom.spark.session()``.
    """

    State = State

    def __init__(self, topology: Topology, props: Mapping[str, Any],
                 spark: SparkSession | None = None) -> None:
        self.config = StreamsConfig(props)
        topology.check_config(self.config)
        if not self.config.get(cfg.BOOTSTRAP_SERVERS):
            raise ConfigError("Missing 'bootstrap.servers': SparkStreams needs the Kafka brokers, e.g. "
                              "{'bootstrap.servers': 'localhost:9092'}.")
        self._props = dict(props)
        self._topology = topology
        self._spark = spark
        self._execution: Execution | None = None
        self._lock = threading.Lock()
        self._failure_lock = threading.RLock()
        self._restarts = 0
        self._replacing_at: float | None = None  # a failed query's replacement waits out its back-off
        self.progress = StreamsProgress()
        self.plan: ApplicationPlan | None = None
        self._run_id = ""
        self._start_threads = 0
        self._offset_clients: tuple[TopicMetadata, CommittedOffsets] | None = None
        self._store_copies: StoreCopies | None = None
        self._router: QueryRouter | None = None
        self._query_http: query_http.QueryHttpServer | None = None
        self._state = State.CREATED
        self._state_listener: StateListener | None = None
        self._exception_handler: UncaughtExceptionHandler | None = None
        self._configured_handler = failure_policy.configured_handler(self.config)  # when none is set in code
        self._metrics: MetricsServer | None = None
        self._instance: ApplicationInstance | None = None

    @property
    def state(self) -> State:
        """CREATED, RUNNING (from ``start()``), ERROR (the query failed), PENDING_SHUTDOWN (in
        ``stop()``), NOT_RUNNING (stopped)."""
        if self._state is State.RUNNING:
            self._failure()
        return self._state

    def set_state_listener(self, listener: StateListener | None) -> None:
        """``listener(new_state, old_state)`` on every change of ``state``; set before ``start()``."""
        self._state_listener = listener

    def set_uncaught_exception_handler(self, handler: UncaughtExceptionHandler | None) -> None:
        """``handler(exception)`` decides what a failed query does: REPLACE_THREAD starts it again from
        the committed offsets (a record that always fails fails it again: answer SHUTDOWN_CLIENT for
        such errors), SHUTDOWN_CLIENT or SHUTDOWN_APPLICATION end it in ERROR."""
        self._exception_handler = handler

    def _set_state(self, new: State) -> None:
        old, self._state = self._state, new
        if old is not new and self._state_listener is not None:
            self._state_listener(new, old)

    def clean_up(self) -> None:
        """Deletes this application's local state (``<state.dir>/<application.id>``): stores are then
        restored from their changelogs on the next start. Only while the application is not running."""
        if self._state in (State.RUNNING, State.PENDING_SHUTDOWN):
            raise ConfigError(f"Cannot clean up the state of {self.config.application_id} while it "
                              f"runs ({self._state.value}); call stop() first.")
        shutil.rmtree(self._app_dir, ignore_errors=True)

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
        """Plans tasks (co-partitioning checked), builds each sub-topology's task once on the driver
        (a missing serde fails here), creates internal topics, starts the query. It resumes from
        the committed offsets of group ``application.id``."""
        if self._execution is not None:
            raise ConfigError("This SparkStreams is already started; stop() it before starting again.")
        mark("start")
        admin_settings = self.config.client_props("admin.")
        admin = clients.admin(self.bootstrap_servers, **admin_settings)
        self.plan = plan_application(self._topology, self.config, admin)
        check_tasks_build(self._topology, self.config)
        mark("planned")
        created = create_internal_topics(self.plan, admin, self.bootstrap_servers, admin_settings)
        mark("internal-topics")
        log.info("Application %s: tasks %s, created internal topics %s", self.config.application_id,
                 self.plan.task_ids, created)
        self._start_latest_sources()
        if self._spark is None:
            import strom.spark

            self._spark = strom.spark.session(app_name=f"strom-{self.config.application_id}",
                                              strom_format=False)
        quiet_logging.unlog_strom_task_kills(self._spark.sparkContext)
        self._app_dir.mkdir(parents=True, exist_ok=True)
        self._run_id = uuid.uuid4().hex
        if self.realtime:
            self._start_threads = stream_threads(self._spark, self.config[NUM_STREAM_THREADS],
                                                 len(self.plan.task_ids))
        elif self.config[NUM_STREAM_THREADS] is not None:
            log.info("num.stream.threads has no effect with execution.mode=microbatch: each micro-batch runs "
                     "one Spark task per stream task")
        if not self.realtime and self.config[NUM_STANDBY_REPLICAS]:
            log.info("num.standby.replicas has no effect with execution.mode=microbatch: a task's "
                     "micro-batch runs wherever Spark places it, and opens its stores there")
        self._execution = self._start_execution()
        mark("started")
        self._instance = ApplicationInstance(
            self.bootstrap_servers, self.config.application_id, min(self.plan.subtopologies[0].source_topics),
            f"stream threads on Spark {self._spark.sparkContext.master}",
            self.config.client_props("main.consumer."), self.config.client_props("admin."))
        self._set_state(State.RUNNING)
        self._metrics = self._metrics or metrics.serve_if_configured(self)
        self._query_http = self._query_http or query_http.serve_if_configured(
            self.config, self._topology, self.query, self.streams_metadata_for_store)

    @property
    def metrics_url(self) -> str | None:
        """The Prometheus endpoint when ``metrics.prometheus.port`` is set (docs/deploy.md#metrics)."""
        return None if self._metrics is None else self._metrics.url

    @property
    def query_url(self) -> str | None:
        """The HTTP face of interactive queries when ``query.http.port`` is set
        (docs/runtime.md#interactive-queries)."""
        return None if self._query_http is None else self._query_http.url

    @property
    def num_stream_threads(self) -> int:
        """Real-time mode: the stream threads of the running batch (after a lost executor fewer, back
        up to ``num.stream.threads`` or the task slots when executors come); 0 before ``start()``."""
        execution = self._execution
        return execution.threads if isinstance(execution, RealtimeExecution) else self._start_threads

    @property
    def realtime(self) -> bool:
        return self.config[EXECUTION_MODE] == REALTIME

    def _start_latest_sources(self) -> None:
        """Partitions of LATEST sources that have no committed offset get their end offset committed
        now, before the query plans its first batch (which starts at the committed offsets, else at
        the earliest): records produced before ``start()`` are skipped, later ones processed."""
        assert self.plan is not None
        latest_topics = set(self.plan.latest_start_topics)
        partitions = [(t, p) for sub in self.plan.subtopologies for t, n in sub.source_topics.items()
                      if t in latest_topics for p in range(n)]
        if not partitions:
            return
        metadata, committed = self._offsets()
        missing = [tp for tp in partitions if tp not in committed.read(partitions)]
        if missing:
            ends = metadata.latest(missing)
            committed.commit(ends)
            log.info("Application %s starts %d partitions at their end (AutoOffsetReset.LATEST)",
                     self.config.application_id, len(ends))

    def _offsets(self) -> tuple[TopicMetadata, CommittedOffsets]:
        """The driver's clients for log and committed offsets, made once per run (``stop()`` closes them)."""
        if self._offset_clients is None:
            source = self._source_plan()
            self._offset_clients = (TopicMetadata(source.source_options()), CommittedOffsets(source))
        return self._offset_clients

    def _source_plan(self) -> SourcePlan:
        assert self.plan is not None
        return SourcePlan(self.bootstrap_servers, self.config.application_id,
                          {str(sub.id): dict(sub.source_topics) for sub in self.plan.subtopologies},
                          self.config[MAX_OFFSETS_PER_TRIGGER], self.config.client_props("main.consumer."),
                          str(self._stop_file))

    def _start_execution(self) -> Execution:
        """Starts the stream tasks on Spark in the configured mode (again after a failure: from the
        committed offsets)."""
        assert self._spark is not None and self.plan is not None
        source = self._source_plan()
        if not self.realtime:
            return MicroBatchExecution(self._spark, self._topology, self._props, self._run_id, source,
                                       self._app_dir, self.config[cfg.COMMIT_INTERVAL_MS], self._record_batch)
        owned = {f"{sub.id}_{p}": source.owned(sub.id, p) for sub in self.plan.subtopologies
                 for p in range(sub.tasks)}
        return RealtimeExecution(self._spark, self._topology, self._props, self._run_id,
                                 self.config.application_id, owned, self._start_threads,
                                 self.config[NUM_STREAM_THREADS],
                                 self.config[REALTIME_BATCH_DURATION_MS] / 1000, self._record_progress,
                                 self._record_batch, self.config[NUM_STANDBY_REPLICAS],
                                 self.config[ACCEPTABLE_RECOVERY_LAG], self._record_standbys,
                                 {f"{sub.id}_{p}" for sub in self.plan.subtopologies if sub.changelog_topics
                                  for p in range(sub.tasks)})

    def _record_batch(self, rows: list[Any]) -> None:
        """A batch ended: in micro-batch mode its rows carry the tasks' figures; in real-time mode the
        threads reported them at every commit already."""
        with self._lock:
            self.progress.batches += 1
            self.progress.batch_finished.append(time.monotonic())
            if self.realtime:
                return
            for row in rows:
                self.progress.add(row["task"], {
                    "batches": 1, "records": row["records"], "output": row["output"],
                    "restored": row["restored"], "skipped": int(row["skipped"]), "reused": int(row["reused"]),
                    "commits": int(not row["skipped"]), "millis": row["millis"]})

    def _record_progress(self, task: str, counters: dict[str, int]) -> None:
        with self._lock:
            self.progress.add(task, counters)

    def _record_standbys(self, thread: str, standbys: dict[str, dict[str, int]]) -> None:
        with self._lock:
            for task, figures in standbys.items():
                standby = self.progress.standbys.setdefault(f"{task}@{thread}", StandbyProgress(task, thread))
                standby.lag = figures["lag"]
                standby.restored += figures["restored"]

    def metadata_for_local_threads(self) -> list[ThreadMetadata]:
        """The stream threads of the running real-time batch (Kafka's ``metadataForLocalThreads``):
        name, state, active tasks, host and process id of the Spark Python worker, time of the last
        commit; empty in micro-batch mode."""
        execution = self._execution
        return execution.thread_metadata() if isinstance(execution, RealtimeExecution) else []

    def lag(self) -> int:
        """Records in the source topics (committed data) that the application has not committed yet,
        read sub-topology by sub-topology; a partition it has committed nothing for counts from its
        first record still kept (retention may have deleted older ones before the application read them)."""
        if self.plan is None:
            raise ConfigError("Call start() first.")
        metadata, committed_offsets = self._offsets()
        behind = 0
        for sub in self.plan.subtopologies:
            partitions = [(t, p) for t, n in sub.source_topics.items() for p in range(n)]
            latest = metadata.latest(partitions)
            committed = committed_offsets.read(partitions)
            uncommitted = [tp for tp in partitions if tp not in committed]
            committed.update(metadata.earliest(uncommitted) if uncommitted else {})
            behind += sum(max(0, end - committed.get(tp, 0)) for tp, end in latest.items())
        return behind

    def wait_until_caught_up(self, timeout: float) -> bool:
        """Waits until every source partition is committed up to its end, seen twice in a row (so
        records an upstream task wrote to a repartition topic meanwhile are counted); False on
        timeout."""
        deadline = time.monotonic() + timeout
        zeros = 0
        while time.monotonic() < deadline:
            self._raise_if_failed()
            zeros = zeros + 1 if self.lag() == 0 else 0
            if zeros == 2:
                return True
            time.sleep(0.2)
        return False

    def await_termination(self, timeout: float | None = None) -> bool:
        """Blocks until the query stops (True) or ``timeout`` seconds pass (False); a failed query
        raises ProcessingError with Spark's message."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            execution = self._execution
            ended = execution is None or not execution.is_active
            self._raise_if_failed()  # a failure the handler answered REPLACE_THREAD: a new query runs
            if ended and self._execution is execution and self._replacing_at is None:
                return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def _raise_if_failed(self) -> None:
        error = self._failure()
        if error is not None:
            raise ProcessingError(f"Application {self.config.application_id} failed: "
                                  f"{failure_policy.failure_summary(error)}") from error

    def _failure(self) -> Exception | None:
        """The query's failure (the state becomes ERROR). A query whose Python worker could not start
        (a busy machine missing Spark's fixed 10 s connect-back timeout) is restarted instead, a few
        times: nothing is lost, it resumes from the committed offsets."""
        with self._failure_lock:  # one thread answers a failure (a metrics scrape reads the state too)
            return self._handle_failure()

    def _handle_failure(self) -> Exception | None:
        if self._replacing_at is not None:
            if time.monotonic() >= self._replacing_at:
                self._replacing_at = None
                self._execution = self._start_execution()
            return None
        error = None if self._execution is None else self._execution.exception()
        if error is None:
            return None
        if any(marker in str(error) for marker in _TRANSIENT) and self._restarts < _MAX_RESTARTS:
            self._restarts += 1
            log.warning("A Spark Python worker of %s failed (%s); starting the stream tasks again from the "
                        "committed offsets (%d/%d)", self.config.application_id,
                        failure_policy.failure_summary(error), self._restarts, _MAX_RESTARTS)
            self._execution.stop()
            self._execution = self._start_execution()
            return None
        if self._handled_by_replacing(error):
            return None
        self._set_state(State.ERROR)
        return error

    def _handled_by_replacing(self, error: Exception) -> bool:
        """Asks the uncaught exception handler; on REPLACE_THREAD the query starts again (from the
        committed offsets) once the handler's back-off has passed: the next look at the failure after
        it starts the query, so no caller sleeps through the back-off."""
        handler = self._exception_handler or self._configured_handler
        if handler is None:
            return False
        try:
            response = handler(error)
        except Exception:
            log.exception("The uncaught exception handler of %s raised; the application stops",
                          self.config.application_id)
            return False
        if response is not StreamThreadExceptionResponse.REPLACE_THREAD:
            return False
        log.warning("Application %s failed (%s); the uncaught exception handler replaces the query: it "
                    "resumes from the committed offsets", self.config.application_id,
                    failure_policy.failure_summary(error))
        self._execution.stop()
        self._replacing_at = time.monotonic() + getattr(handler, "delay_s", 0.0)
        return True

    def query(self, request: StateQueryRequest) -> StateQueryResult:
        """An IQv2 request (``StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(k))``)
        answered by the stream threads that hold the store's partitions, from their committed state
        (real-time mode; docs/runtime.md#interactive-queries)."""
        return self._query_router().query(request)

    def query_metadata_for_key(self, store_name: str, key: Any, serializer: Any = None) -> KeyQueryMetadata:
        """The partition of ``store_name`` that holds ``key`` and the endpoints serving it now."""
        return self._query_router().query_metadata_for_key(store_name, key, serializer)

    def streams_metadata_for_store(self, store_name: str) -> list[StreamsMetadata]:
        """The query endpoints serving ``store_name`` now, with their active and standby partitions."""
        return self._query_router().streams_metadata_for_store(store_name)

    def _query_router(self) -> QueryRouter:
        if self.plan is None:
            raise InvalidStateStoreError("Call start() before querying a store: the stores' partitions are "
                                         "known once the application is planned.")
        if not self.realtime:
            raise InvalidStateStoreError(
                "IQv2 queries are answered by real-time stream threads; with execution.mode=microbatch a "
                "task has no home to ask: use store(), which reads the driver's copies of the stores.")
        if self._router is None:
            builder = self._topology.internal
            tasks = {sub.id: sub.tasks for sub in self.plan.subtopologies}
            stores: dict[str, tuple[int, int] | None] = {
                name: (sub.id, tasks[sub.id]) for sub in builder.subtopologies() for name in sub.stores}
            stores.update(dict.fromkeys(builder.global_stores))
            self._router = QueryRouter(self.config.application_id, stores, self._query_threads,
                                       self._store_key_serializer)
        return self._router

    def _query_threads(self) -> tuple[list[Any], str] | None:
        execution = self._execution
        if not isinstance(execution, RealtimeExecution):
            return None
        return execution.thread_metadata(), execution.token

    def _store_key_serializer(self, store_name: str) -> Any:
        serde = getattr(self._topology.internal.store_builders[store_name], "key_serde", None)
        return (serde or default_serde(self.config, "key", f"store {store_name!r}")).serializer()

    def store(self, params: StoreQueryParameters) -> Any:
        """A read-only view of a store (interactive query), e.g.
        ``store(StoreQueryParameters.from_name("counts", QueryableStoreTypes.key_value_store()))``.

        While a real-time application runs, each read is an IQv2 request to the stream threads
        (``query``): active tasks only, standbys too with ``params.enable_stale_stores()``. The explicit
        fallback, in micro-batch mode (whose tasks have no home) and once the application is stopped: the
        driver's copy of the store, first brought up to the end of the store's changelog (committed data
        under exactly-once) unless ``params.enable_stale_stores()`` (call ``stop()`` again to close the
        copies).
        """
        if self.plan is None:
            raise InvalidStateStoreError("Call start() before querying a store: the stores' changelog "
                                         "partitions are known once the application is planned.")
        if self.realtime and self._execution is not None:
            router = self._query_router()
            tasks = router.store_partitions(params.store_name)
            builder = self._topology.internal
            store_builder = (builder.store_builders[params.store_name] if tasks is not None
                             else builder.global_stores[params.store_name].store_builder)
            return remote_view(params, store_builder, tasks, router.query,
                               lambda: self._execution is not None)
        if self._store_copies is None:
            self._store_copies = StoreCopies(self._topology, self.config, self.plan)
        return self._store_copies.store(params)

    def stop(self) -> None:
        """Lets the running commit finish and stops the stream tasks (real-time: the threads commit
        and end their batch; micro-batch: no more batches are planned, a running one commits); closes
        the driver's store copies of interactive queries."""
        if self._store_copies is not None:
            self._store_copies.close()
            self._store_copies = None
        if self._router is not None:
            self._router.close()
            self._router = None
        execution = self._execution
        if execution is None:
            return
        self._set_state(State.PENDING_SHUTDOWN)
        with self._failure_lock:  # a replacement waiting out its back-off never starts
            self._replacing_at = None
        execution.stop()
        self._execution = None
        self._release_open_tasks()
        if self._instance is not None:
            self._instance.close()
            self._instance = None
        if self._offset_clients is not None:
            self._offset_clients[1].close()
            self._offset_clients = None
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self._query_http is not None:
            self._query_http.close()
            self._query_http = None
        self._set_state(State.NOT_RUNNING)

    def _release_open_tasks(self) -> None:
        """Waits until the Python workers have closed the tasks they keep open (their stores and
        producers), so the state directory can be used or deleted once ``stop()`` returns."""
        for task_id in self.plan.task_ids if self.plan else ():
            directory = self._app_dir / task_id
            if not directory.is_dir():
                continue
            try:
                TaskLease.acquire(directory, _RELEASE_WAIT_S).release()
            except ProcessorStateError as exc:
                log.warning("Stopping %s: %s", self.config.application_id, exc)

    def __enter__(self) -> SparkStreams:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
