"""The word count (``wordcount.py``) submitted to a standalone cluster (``support.spark_cluster``), as the
executor-loss tests run it: the driver in the background, input that keeps arriving, and what those tests
observe from outside the application (committed offsets, the tasks each worker opened, its output).

    driver = WordCountDriver(cluster, broker.bootstrap_servers, names, tmp_path, app_id, "realtime",
                             DEFAULTS, cores_max=2)
    with driver:                                  # SIGKILLs spark-submit's process group if still running
        driver.wait_until(lambda: ..., 240, "both executors used")   # fails early if the driver exited
        with SteadyWriter(bootstrap, names["lines"], lines):        # input arriving meanwhile
            cluster.kill_worker(0)
            moved = driver.resumed_after(time.monotonic(), 60)
        driver.finish()                           # input done: waits for the driver's clean exit
    assert_counted_once(bootstrap, names["counts"], lines)
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import TopicPartition

from strom.kafka import clients
from support.spark_cluster import SparkCluster

from .conftest import produce_lines, read_updates
from .wordcount import PROGRESS

APP = Path(__file__).with_name("wordcount.py")
ROOT = Path(__file__).resolve().parents[3]
DEFAULTS = json.dumps({"commit.interval.ms": None, "realtime.batch.duration.ms": None,
                       "num.stream.threads": None, "max.offsets.per.trigger": None})
"""wordcount.py's overrides that leave the runtime's defaults: batch duration, commit interval, threads,
micro-batch size."""


def committed(bootstrap: str, app_id: str, partitions: Sequence[tuple[str, int]]
              ) -> dict[tuple[str, int], int]:
    consumer = clients.consumer(bootstrap, group_id=app_id)
    try:
        offsets = consumer.committed([TopicPartition(t, p) for t, p in partitions], 10)
        return {(tp.topic, tp.partition): tp.offset for tp in offsets}
    finally:
        consumer.close()


def caught_up(bootstrap: str, app_id: str, partitions: Sequence[tuple[str, int]]) -> bool:
    consumer = clients.consumer(bootstrap, group_id=app_id)
    try:
        ends = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), 10)[1] for tp in partitions}
    finally:
        consumer.close()
    return committed(bootstrap, app_id, partitions) == ends


def tasks_in(worker_dir: Path, app_id: str) -> set[str]:
    """The stream tasks a worker opened (each has a directory in the worker's own state dir)."""
    return {path.name for path in (worker_dir / "state" / app_id).glob("*_*")}


def assert_counted_once(bootstrap: str, counts: str, lines: Sequence[tuple[str, str]]) -> None:
    """read_committed, every word's last count is its count in ``lines`` and no update repeats."""
    expected = Counter(w for _, line in lines for w in line.split())
    updates = read_updates(bootstrap, counts)
    assert {k: v[-1] for k, v in updates.items()} == dict(expected)
    for key, seen in updates.items():
        assert seen == sorted(set(seen)), f"{key}: an update was written twice: {seen}"


class WordCountDriver:
    """``wordcount.py`` (or ``app``, which takes its arguments) run by ``spark-submit`` on ``cluster``
    under exactly_once_v2, one core per executor, ``spark.cores.max=cores_max``,
    ``spark.task.maxFailures=8``; its output in ``driver.log``."""

    def __init__(self, cluster: SparkCluster, bootstrap: str, names: dict[str, str], tmp_path: Path,
                 app_id: str, mode: str, overrides: str = DEFAULTS, cores_max: int = 2,
                 app: Path = APP) -> None:
        self.cluster, self.bootstrap, self.names, self.app_id = cluster, bootstrap, names, app_id
        self.log_path = tmp_path / f"driver-{app_id}.log"
        self.input_done = tmp_path / f"input-done-{app_id}"
        self.partitions = [(topic, p) for topic in (names["lines"], f"{app_id}-words-repartition")
                           for p in range(2)]
        """The input and repartition partitions: their committed offsets move as the tasks commit."""
        self._args = (app, bootstrap, names["lines"], names["counts"], str(tmp_path / f"state-{app_id}"),
                      app_id, mode, str(self.input_done), overrides)
        self._cores_max = cores_max
        self.process = self.submit()

    def submit(self) -> Any:
        """Starts the driver (again, after ``kill()``: the same application, state and log)."""
        return self.cluster.submit_background(
            *self._args, output=self.log_path,
            conf={"spark.app.name": self.app_id, "spark.task.maxFailures": "8",
                  "spark.cores.max": str(self._cores_max), "spark.executor.cores": "1",
                  "spark.python.daemon.module": "strom.spark.runtime.daemon"},
            env={"PYTHONPATH": str(ROOT / "tests" / "spark" / "runtime")})

    def restart(self) -> None:
        self.process = self.submit()

    def logs(self) -> str:
        """The end of the driver's output and of every executor's stderr, for a failure's message."""
        driver = self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""
        workers = sorted(int(p.name.split("-")[1]) for p in self.cluster.base_dir.glob("worker-*")
                         if p.is_dir())
        return driver + "\n--- executors ---\n" + "\n".join(
            self.cluster.executor_logs(i)[-1500:] for i in workers)

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> float:
        """Polls ``condition`` while the driver runs; returns the seconds it took."""
        started = time.monotonic()
        while not condition():
            assert self.process.poll() is None, f"the driver exited before {what}:\n{self.logs()}"
            assert time.monotonic() - started < timeout, f"not within {timeout:.0f} s: {what}\n{self.logs()}"
            time.sleep(0.25)
        return time.monotonic() - started

    def tasks_on(self, worker: int) -> set[str]:
        return tasks_in(self.cluster.worker_dir(worker), self.app_id)

    def committed(self) -> dict[tuple[str, int], int]:
        return committed(self.bootstrap, self.app_id, self.partitions)

    def all_committing(self, timeout: float) -> float:
        """Waits until every partition's committed offset moved past where it stands now (each task
        processed and committed since): the observed sign that a batch is under way."""
        before = self.committed()
        return self.wait_until(lambda: all(o > before[tp] for tp, o in self.committed().items()), timeout,
                               "every partition committed")

    def resumed_after(self, since: float, timeout: float) -> dict[tuple[str, int], float]:
        """Seconds from ``since`` until each partition's committed offset moved past where it stood when
        this was called: the partitions of the lost tasks stand still until their new owner commits."""
        before = self.committed()
        moved: dict[tuple[str, int], float] = {}
        deadline = time.monotonic() + timeout
        while len(moved) < len(self.partitions) and time.monotonic() < deadline:
            for tp, offset in self.committed().items():
                if tp not in moved and offset > before[tp]:
                    moved[tp] = time.monotonic() - since
            time.sleep(0.25)
        return moved

    def finish(self, timeout: float = 300.0) -> dict[str, Any]:
        """Says the input is complete, waits for the driver to catch up and exit 0; returns what it
        printed after ``PROGRESS`` (records restored per task, standbys, standby metrics)."""
        self.input_done.touch()
        self.process.wait(timeout=timeout)
        assert self.process.returncode == 0, self.logs()
        return json.loads(next(line for line in self.log_path.read_text().splitlines()[::-1]
                               if line.startswith(PROGRESS)).split(":", 1)[1])

    def kill(self) -> None:
        """SIGKILLs spark-submit's JVM and the Python driver it runs (their process group)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def __enter__(self) -> WordCountDriver:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()


class SteadyWriter:
    """Input that keeps arriving: ``lines`` produced a slice every ``every_s`` in a thread of its own
    until the ``with`` block ends, then the rest at once, so input flows for as long as the scenario
    inside takes and no longer. A slice waits out a cluster that cannot take writes for a while (nodes
    killed: up to librdkafka's 300 s ``message.timeout.ms``); a writer that fails all the same fails the
    ``with`` block, so a test never compares its output with input that was never written."""

    FLUSH_S = 300.0

    def __init__(self, bootstrap: str, topic: str, lines: Sequence[tuple[str, str]], per_slice: int = 20,
                 every_s: float = 0.25) -> None:
        self._bootstrap, self._topic, self._lines = bootstrap, topic, list(lines)
        self._per_slice, self._every_s = per_slice, every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._failure: BaseException | None = None

    def _write(self) -> None:
        try:
            start = 0
            while start < len(self._lines) and not self._done.wait(self._every_s):
                produce_lines(self._bootstrap, self._topic, self._lines[start:start + self._per_slice],
                              self.FLUSH_S)
                start += self._per_slice
            produce_lines(self._bootstrap, self._topic, self._lines[start:], self.FLUSH_S)
        except BaseException as exc:  # re-raised by __exit__, in the test's thread
            self._failure = exc

    def __enter__(self) -> SteadyWriter:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()
        if self._failure is not None and exc is None:
            raise AssertionError("the test's input writer failed: not every line was written"
                                 ) from self._failure
