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
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from strom.errors import ConfigError
from strom.spark.runtime.control import ThreadControl, ThreadMetadata, driver_host
from strom.spark.runtime.executor import SUMMARY_DDL, BatchSink
from strom.spark.runtime.thread import StreamThreadRunner, ThreadPlan
from strom.spark.runtime.worker_pool import own_worker_pool
from strom.streams.processor.topology import Topology

__all__ = [
    "HELLO_TIMEOUT_S",
    "SLOTS_WAIT_S",
    "ProgressSink",
    "RealtimeExecution",
    "stream_threads",
    "task_slots",
]

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 30.0
"""How long the first threads of a batch wait for the others before tasks are assigned anyway."""
SLOTS_WAIT_S = 60.0
"""How long ``start()`` waits for a cluster's executors to offer the task slots the threads need."""
_STOP_GRACE_S = 30.0

ProgressSink = Callable[[str, dict[str, int]], None]


def task_slots(spark: SparkSession) -> int:
    """Spark tasks that can run at once: executors' cores / ``spark.task.cpus`` (local[n]: n)."""
    context = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    return int(context.maxNumConcurrentTasks(context.resourceProfileManager().defaultResourceProfile()))


def stream_threads(spark: SparkSession, requested: int | None, tasks: int,
                   wait_s: float = SLOTS_WAIT_S) -> int:
    """How many stream threads to run: ``num.stream.threads``, or what the task slots allow; never
    more than there are tasks. A long-running thread holds its slot for the whole batch, so a thread
    without a slot would leave its tasks unprocessed: fewer slots than threads is an error."""
    needed = min(requested or 1, tasks)
    deadline = time.monotonic() + (0 if spark.sparkContext.master.startswith("local") else wait_s)
    slots = task_slots(spark)
    while slots < needed and time.monotonic() < deadline:  # a cluster's executors still registering
        time.sleep(0.5)
        slots = task_slots(spark)
    if requested is None:
        return max(1, min(slots, tasks))
    if slots < needed:
        raise ConfigError(
            f"num.stream.threads={requested} needs {needed} Spark task slots, but the cluster offers "
            f"{slots} (master {spark.sparkContext.master}). Each stream thread holds a slot for the whole "
            "batch: lower num.stream.threads, or give Spark more cores (local[N], more executors or "
            "spark.executor.cores).")
    if requested > tasks:
        log.info("num.stream.threads=%d but the application has %d stream tasks: running %d threads",
                 requested, tasks, tasks)
    return needed


class RealtimeExecution:
    """The driver's loop of real-time batches for one ``SparkStreams.start()``."""

    def __init__(self, spark: SparkSession, topology: Topology, props: dict[str, Any], run_id: str,
                 application_id: str, owned: dict[str, tuple[str, ...]], threads: int, duration_s: float,
                 on_progress: ProgressSink, on_batch: BatchSink) -> None:
        self._spark = spark
        self._topology = topology
        self._props = props
        self._run_id = run_id
        self._application_id = application_id
        self._owned = owned
        self.threads = threads
        self._duration_s = duration_s
        self._on_batch = on_batch
        self._on_progress = on_progress
        conf = dict(spark.sparkContext.getConf().getAll())
        self._control = ThreadControl(driver_host(conf), self._progress)
        self._job_group = f"strom-{application_id}-{run_id}"
        self._stopping = threading.Event()
        self._error: Exception | None = None
        self._loop = threading.Thread(target=self._run, name=f"strom-realtime-{application_id}", daemon=True)
        self._loop.start()

    @property
    def is_active(self) -> bool:
        return self._loop.is_alive()

    def exception(self) -> Exception | None:
        return self._error

    def thread_metadata(self) -> list[ThreadMetadata]:
        return sorted(self._control.threads.values(), key=lambda t: t.thread_name)

    def _progress(self, thread: str, tasks: dict[str, dict[str, int]]) -> None:
        for task, counters in tasks.items():
            self._on_progress(task, counters)

    def _run(self) -> None:
        context = self._spark.sparkContext
        context.setJobGroup(self._job_group, f"strom {self._application_id}: {self.threads} stream threads",
                            interruptOnCancel=True)
        batch = 0
        try:
            while not self._stopping.is_set():
                batch += 1
                self._control.begin_batch(batch, self.threads, sorted(self._owned), HELLO_TIMEOUT_S)
                rows = self._batch(batch).collect()
                self._on_batch(rows)
        except Exception as exc:
            if not self._stopping.is_set():
                log.error("Application %s: a real-time batch failed: %s", self._application_id, exc)
                self._error = exc

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
        self._loop.join(_STOP_GRACE_S)
        if self._loop.is_alive():
            log.warning("Application %s: stream threads did not stop in %.0fs; cancelling their Spark job",
                        self._application_id, _STOP_GRACE_S)
            self._spark.sparkContext.cancelJobGroup(self._job_group)
            self._loop.join(_STOP_GRACE_S)
        self._control.close()
