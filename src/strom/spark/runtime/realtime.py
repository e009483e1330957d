"""Real-time execution (``execution.mode=realtime``): long-running Spark tasks as stream threads.

The idea of Spark 4.1's Real-time Mode, applied to strom's own tasks: the driver runs one Spark
job per batch, and a batch is only a checkpoint interval (``realtime.batch.duration.ms``, minutes).
Each of its ``num.stream.threads`` Spark tasks is a ``StreamThread`` that consumes, processes and
commits its stream tasks continuously (``strom.spark.runtime.thread``); the driver hears from them
after every commit over ``ThreadControl`` and starts the next batch as soon as one ends. Spark
still places the threads on executors, retries a failed one and shows the jobs in its UI.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from strom.errors import ConfigError, ProcessingError
from strom.kafka.transactional import TransactionalProducer
from strom.spark.runtime.control import ThreadControl, ThreadMetadata, driver_host
from strom.spark.runtime.executor import SUMMARY_DDL, BatchSink
from strom.spark.runtime.open_task import producer_config
from strom.spark.runtime.thread import StreamThreadRunner, ThreadPlan, transactional_id
from strom.spark.runtime.worker_pool import own_worker_pool
from strom.spark.startup import mark
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig
from strom.streams.processor.topology import Topology

__all__ = [
    "HELLO_TIMEOUT_S",
    "SLOTS_WAIT_S",
    "ProgressSink",
    "RealtimeExecution",
    "StandbySink",
    "stream_threads",
    "task_slots",
    "unrecorded_slots",
]

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 15.0
"""How long after the first thread of a batch said hello the tasks are assigned among the threads
present (a thread Spark cannot schedule must not hold tasks)."""
SLOTS_WAIT_S = 60.0
"""How long ``start()`` waits for a cluster's executors to offer the task slots the threads need."""
WATCH_S = 0.2
"""How often the driver looks at a running batch (lost threads, slots gained or lost)."""
SLOTS_EVERY_S = 1.0
"""How often it asks Spark for the task slots."""
GROW_SETTLE_S = 2.0
"""More slots must be there this long before the batch ends to use them (executors come in groups)."""
END_GRACE_S = 5.0
"""After an early end, how long the batch's Spark job may take once no thread is connected any more
(retries of lost threads get a slot, say hello and end at once) before it is cancelled: a retry
that no slot will come for must not hold the next batch."""
_STOP_GRACE_S = 30.0
SLOTS_FILE = "stream-thread-slots"
"""In ``<state.dir>/<application.id>``: how many thread slots (transactional ids) runs have used, so
that a restarted driver fences every slot an earlier run may have left a zombie on."""
_FENCING_PARALLELISM = 8

ProgressSink = Callable[[str, dict[str, int]], None]
StandbySink = Callable[[str, dict[str, dict[str, int]]], None]
"""(thread, {task: {"lag": ..., "restored": ...}}) for the standbys a thread hosts."""


def task_slots(spark: SparkSession) -> int:
    """Spark tasks that can run at once: executors' cores / ``spark.task.cpus`` (local[n]: n)."""
    context = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    return int(context.maxNumConcurrentTasks(context.resourceProfileManager().defaultResourceProfile()))


def unrecorded_slots(tasks: int, threads: int, requested: int | None, parallelism: int) -> int:
    """The thread slots a first run fences when no earlier run recorded its slots (a new application,
    or its ``state.dir`` lost): as many threads as an earlier run of this configuration could have had,
    the most of ``num.stream.threads``, the threads starting now and Spark's default parallelism (its
    cores, or ``spark.default.parallelism``), never more than one per task. Fencing one slot per task
    instead costs an ``init_transactions`` (and a transactional id the coordinator keeps) per task."""
    return min(tasks, max(threads, requested or 0, parallelism))


def _local(spark: SparkSession) -> bool:
    return spark.sparkContext.master.startswith("local")


def stream_threads(spark: SparkSession, requested: int | None, tasks: int,
                   wait_s: float = SLOTS_WAIT_S) -> int:
    """How many stream threads to start with: ``num.stream.threads``, or what the task slots allow;
    never more than there are tasks. A long-running thread holds its slot for the whole batch, so a
    thread without a slot would leave its tasks unprocessed: on a local master (its slots never
    change) fewer slots than threads is an error; on a cluster the application starts with the slots
    there and grows when executors come."""
    needed = min(requested or 1, tasks)
    deadline = time.monotonic() + (0 if _local(spark) else wait_s)
    slots = task_slots(spark)
    while slots < needed and time.monotonic() < deadline:  # a cluster's executors still registering
        time.sleep(0.5)
        slots = task_slots(spark)
    if requested is None:
        return max(1, min(slots, tasks))
    if slots < needed and (_local(spark) or slots == 0):
        raise ConfigError(
            f"num.stream.threads={requested} needs {needed} Spark task slots, but the cluster offers "
            f"{slots} (master {spark.sparkContext.master}). Each stream thread holds a slot for the whole "
            "batch: lower num.stream.threads, or give Spark more cores (local[N], more executors or "
            "spark.executor.cores).")
    if slots < needed:
        log.warning("num.stream.threads=%d but Spark offers %d task slots after %.0fs: starting %d stream "
                    "threads, more when executors come", requested, slots, wait_s, slots)
        return slots
    if requested > tasks:
        log.info("num.stream.threads=%d but the application has %d stream tasks: running %d threads",
                 requested, tasks, tasks)
    return needed


class _BatchJob:
    """One batch's Spark job, collected in a thread of its own so that the driver can watch the
    batch meanwhile (PySpark pins each Python thread to a JVM thread: the job group is set there)."""

    def __init__(self, spark: SparkSession, group: str, description: str, frame: Any) -> None:
        self.rows: list[Any] = []
        self.error: Exception | None = None
        self._spark, self._group, self._description, self._frame = spark, group, description, frame
        self._thread = threading.Thread(target=self._collect, name=f"strom-batch-{group}", daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        try:
            self._spark.sparkContext.setJobGroup(self._group, self._description, interruptOnCancel=True)
            self.rows = self._frame.collect()
        except Exception as exc:
            self.error = exc

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def cancel(self) -> None:
        self._spark.sparkContext.cancelJobGroup(self._group)


class RealtimeExecution:
    """The driver's loop of real-time batches for one ``SparkStreams.start()``.

    Each batch runs as many stream threads as there are task slots now (at most ``wanted``, at most
    one per task). The driver watches the batch and ends it early, the running threads committing and
    parking their tasks, when a thread is lost (its executor or Python worker died: Spark would retry
    it only once a slot frees, at the end of the batch), when Spark's slots fall below the threads
    (an executor lost) or rise while fewer threads run than wanted (executors added or back); the next
    batch starts at once with the slots there, the tasks assigned sticky."""

    def __init__(self, spark: SparkSession, topology: Topology, props: dict[str, Any], run_id: str,
                 application_id: str, owned: dict[str, tuple[str, ...]], threads: int, wanted: int | None,
                 duration_s: float, on_progress: ProgressSink, on_batch: BatchSink, standby_replicas: int = 0,
                 acceptable_recovery_lag: int = 0, on_standbys: StandbySink | None = None,
                 stateful: Collection[str] | None = None) -> None:
        self._spark = spark
        self._topology = topology
        self._props = props
        self._run_id = run_id
        self._application_id = application_id
        self._owned = owned
        self.threads = threads
        self._wanted = min(wanted or len(owned), len(owned))
        self._local = _local(spark)
        self._duration_s = duration_s
        self._on_batch = on_batch
        self._on_progress = on_progress
        conf = dict(spark.sparkContext.getConf().getAll())
        self._replicas = standby_replicas
        self._acceptable_lag = acceptable_recovery_lag
        self._stateful = stateful
        self._control = ThreadControl(driver_host(conf), self._progress, on_standbys)
        self._config = StreamsConfig(props)
        self._slots_file = Path(self._config[cfg.STATE_DIR]) / application_id / SLOTS_FILE
        self._suspects: set[int] = set(range(self._slots_used(
            unrecorded_slots(len(owned), threads, wanted, spark.sparkContext.defaultParallelism))))
        """Thread slots whose holder may still run: fenced before the next batch's tasks are assigned."""
        self._job_group = f"strom-{application_id}-{run_id}"
        """Prefix of each batch's job group (``-<batch>``)."""
        self._stopping = threading.Event()
        self._error: Exception | None = None
        self._job: _BatchJob | None = None
        self.rebalances = 0
        """Batches ended early to run another number of threads or to replace a lost one."""
        self._loop = threading.Thread(target=self._run, name=f"strom-realtime-{application_id}", daemon=True)
        self._loop.start()

    @property
    def is_active(self) -> bool:
        return self._loop.is_alive()

    def exception(self) -> Exception | None:
        return self._error

    @property
    def token(self) -> str:
        """The run's secret: the stream threads' and their query endpoints' key."""
        return self._control.token

    def thread_metadata(self) -> list[ThreadMetadata]:
        return sorted(self._control.threads.values(), key=lambda t: t.thread_name)

    def _progress(self, thread: str, tasks: dict[str, dict[str, int]]) -> None:
        for task, counters in tasks.items():
            self._on_progress(task, counters)

    def _run(self) -> None:
        batch = 0
        try:
            while not self._stopping.is_set():
                if batch > 0:
                    threads = self._threads_now()
                    if threads == 0:
                        continue
                    if threads != self.threads:
                        log.info("Application %s: %d stream threads (were %d)", self._application_id,
                                 threads, self.threads)
                    self.threads = threads
                batch += 1
                self._record_slots()
                assignment = self._control.begin_batch(
                    batch, self.threads, sorted(self._owned), HELLO_TIMEOUT_S, self._replicas,
                    self._acceptable_lag, self._stateful, self._suspects,
                    self._fence if self._config.exactly_once else None)
                job = self._job = _BatchJob(
                    self._spark, f"{self._job_group}-{batch}",
                    f"strom {self._application_id}: batch {batch}, {self.threads} stream threads",
                    self._batch(batch))
                mark("job-submitted", f"batch {batch}")
                self._watch(job)
                self._suspects = set(assignment.hellos)
                self._on_batch(job.rows)
        except Exception as exc:
            if not self._stopping.is_set():
                log.info("Application %s: a real-time batch failed: %s", self._application_id, exc)
                self._error = exc

    def _slots_used(self, default: int) -> int:
        """How many thread slots runs used (recorded in ``SLOTS_FILE``); without a record ``default``."""
        try:
            return max(int(self._slots_file.read_text()), 0)
        except (OSError, ValueError):
            return default

    def _record_slots(self) -> None:
        """Records the slots used so far and those still to fence (never fewer than recorded), before the
        batch's threads start: a driver killed during this batch leaves the record its restart fences by."""
        used = max(self._slots_used(0), self.threads, max(self._suspects, default=-1) + 1)
        if used != self._slots_used(-1):
            self._slots_file.parent.mkdir(parents=True, exist_ok=True)
            self._slots_file.write_text(str(used))

    def _fence(self, slots: list[int]) -> None:
        """Fences the transactional ids of ``slots``: ``init_transactions`` bumps each id's epoch, so an
        earlier holder (a zombie thread, a retry that has not said hello) can no longer commit, and
        aborts its open transaction."""
        bootstrap = self._config[cfg.BOOTSTRAP_SERVERS]
        settings = producer_config(self._config)

        def fence(slot: int) -> None:
            TransactionalProducer(
                bootstrap, transactional_id(self._application_id, slot),
                f"The driver of {self._application_id} fencing stream thread slot {slot}",
                **settings).init_transactions()

        with ThreadPoolExecutor(min(_FENCING_PARALLELISM, len(slots)), "strom-fence") as pool:
            list(pool.map(fence, slots))

    def _threads_now(self) -> int:
        """The threads the next batch runs: the slots there, at most ``wanted``; 0 after waiting a
        moment when there is no slot at all (every executor lost)."""
        slots = task_slots(self._spark)
        if slots == 0:
            log.warning("Application %s: no Spark task slot (every executor lost?); waiting for one",
                        self._application_id)
            self._stopping.wait(SLOTS_EVERY_S)
        return min(self._wanted, slots)

    def _watch(self, job: _BatchJob) -> None:
        """Waits for the batch's job; ends the batch early when it should, and cancels the job when
        only retries of lost threads keep it (they might wait for a slot that never comes)."""
        ending: float | None = None
        quiet: float | None = None
        grown: float | None = None
        next_slots = time.monotonic() + SLOTS_EVERY_S
        while not job.join(WATCH_S):
            now = time.monotonic()
            if ending is None:
                reason = "stopping" if self._stopping.is_set() else self._control.reason_to_end()
                if reason is None and not self._local and now >= next_slots:
                    next_slots = now + SLOTS_EVERY_S
                    slots = task_slots(self._spark)
                    grown = (grown or now) if self.threads < min(self._wanted, slots) else None
                    if slots < self.threads:
                        reason = f"Spark offers {slots} task slots for {self.threads} stream threads"
                    elif grown is not None and now - grown >= GROW_SETTLE_S:
                        reason = f"Spark offers {slots} task slots, {self.threads} stream threads run"
                if reason is not None:
                    if reason != "stopping":
                        self.rebalances += 1
                        log.warning("Application %s: ending the batch early (%s)", self._application_id,
                                    reason)
                    self._control.end_batch()
                    ending = now
                continue
            quiet = (quiet or now) if self._control.live_threads() == 0 else None
            grace = 1.0 if self._stopping.is_set() else 0.0 if self._control.frozen_threads() else END_GRACE_S
            if quiet is not None and now - quiet >= grace:
                log.info("Application %s: cancelling what is left of the batch's Spark job (retries of lost "
                         "stream threads)", self._application_id)
            elif now - ending >= _STOP_GRACE_S:
                log.warning("Application %s: %d stream thread(s) still running %.0f s after the batch's end "
                            "(a processor stuck in a call?): cancelling what is left of the batch's Spark "
                            "job; their open transactions abort, their tasks restart from their last commit",
                            self._application_id, self._control.live_threads(), _STOP_GRACE_S)
            else:
                continue
            job.cancel()
            job.join()
            return
        failure = self._control.failure
        if job.error is not None and (ending is None or failure is not None):
            raise job.error  # Spark's own account of the failure, when it has one
        if failure is not None:
            raise ProcessingError(f"A stream thread of {self._application_id} failed: {failure}")

    def _batch(self, batch: int) -> Any:
        host, port = self._control.address
        plan = ThreadPlan(self._run_id, batch, self.threads, (host, port), self._control.token,
                          self._duration_s, self._owned)
        runner = StreamThreadRunner(self._topology, self._props, plan)
        with own_worker_pool(self._spark):
            return self._spark.range(0, self.threads, 1, self.threads).mapInArrow(runner, SUMMARY_DDL)

    def stop(self) -> None:
        """Tells the threads to commit and end their batch, waits for the job; cancels it if the
        threads do not end in time (an attempt killed mid-transaction is aborted on the next start)."""
        self._stopping.set()
        self._control.stop_threads()
        self._loop.join(_STOP_GRACE_S + 5)
        if self._loop.is_alive():
            log.warning("Application %s: stream threads did not stop in %.0fs; cancelling their Spark job",
                        self._application_id, _STOP_GRACE_S)
            if self._job is not None:
                self._job.cancel()
            self._loop.join(_STOP_GRACE_S)
        self._control.close()
