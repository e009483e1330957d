"""Losing a Spark executor costs seconds, never a stall (issue 27), with the runtime's defaults.

A real standalone cluster of a master and two workers with one core each (``spark.cores.max=2``,
``spark.task.maxFailures=8``) runs the word count (a repartition step, a count store) under
exactly_once_v2 with the default batch duration, commit interval and thread count, while lines keep
arriving. Once the first batch is well under way, the worker running some of the stream tasks is
SIGKILLed with its executor and Python workers. Every stream task must commit again within 30 s of
the kill (measured outside the application: the committed offsets of each of its input partitions
move), a third worker started later must get stream tasks, and read_committed every word is counted
exactly once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from strom.kafka import clients
from support.spark_cluster import SparkCluster

from .conftest import produce_lines, produce_steadily, read_updates

# a cluster, Spark's start-up, a kill and a recovery each: minutes on a loaded 2-core machine
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(600)]

APP = Path(__file__).with_name("wordcount.py")
ROOT = Path(__file__).resolve().parents[3]
RESUME_WITHIN_S = 30.0
DEFAULTS = json.dumps({"commit.interval.ms": None, "realtime.batch.duration.ms": None,
                       "num.stream.threads": None})
STANDBY = json.dumps({**json.loads(DEFAULTS), "num.standby.replicas": 1, "metrics.prometheus.port": 0})


def committed(bootstrap: str, app_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    consumer = clients.consumer(bootstrap, group_id=app_id)
    try:
        offsets = consumer.committed([TopicPartition(t, p) for t, p in partitions], 10)
        return {(tp.topic, tp.partition): tp.offset for tp in offsets}
    finally:
        consumer.close()


def tasks_in(worker_dir: Path, app_id: str) -> set[str]:
    """The stream tasks a worker opened (each has a directory in the worker's own state dir)."""
    return {path.name for path in (worker_dir / "state" / app_id).glob("*_*")}


def resumed_after(bootstrap: str, app_id: str, partitions: list[tuple[str, int]], since: float,
                  timeout: float) -> dict[tuple[str, int], float]:
    """Seconds from ``since`` until each partition's committed offset moved past where it stood when
    this was called: the partitions of the lost tasks stand still until their new owner commits."""
    before = committed(bootstrap, app_id, partitions)
    moved: dict[tuple[str, int], float] = {}
    deadline = time.monotonic() + timeout
    while len(moved) < len(partitions) and time.monotonic() < deadline:
        now = committed(bootstrap, app_id, partitions)
        for tp, offset in now.items():
            if tp not in moved and offset > before[tp]:
                moved[tp] = time.monotonic() - since
        time.sleep(0.25)
    return moved


@pytest.mark.parametrize("mode", ["realtime", "microbatch"])
def test_a_lost_worker_costs_seconds_and_a_new_one_is_used(broker, topics, tmp_path, mode):
    names = topics(lines=2, counts=2)
    app_id = f"failover-{mode}-{uuid.uuid4().hex[:8]}"
    rng = random.Random(27)
    words = [f"w{i}" for i in range(40)]
    lines = [(f"k{i}", " ".join(rng.choices(words, k=rng.randint(1, 4)))) for i in range(4000)]
    produce_lines(broker.bootstrap_servers, names["lines"], lines[:200])
    input_done = tmp_path / "input-done"
    partitions = [(topic, p) for topic in (names["lines"], f"{app_id}-words-repartition") for p in range(2)]
    driver_log = tmp_path / "driver.log"
    with SparkCluster(tmp_path / "cluster", workers=2, cores_per_worker=1) as cluster:
        driver = cluster.submit_background(
            APP, broker.bootstrap_servers, names["lines"], names["counts"], str(tmp_path / "driver-state"),
            app_id, mode, str(input_done), DEFAULTS, output=driver_log,
            conf={"spark.app.name": app_id, "spark.task.maxFailures": "8", "spark.cores.max": "2",
                  "spark.executor.cores": "1", "spark.python.daemon.module": "strom.spark.runtime.daemon"},
            env={"PYTHONPATH": str(ROOT / "tests" / "spark" / "runtime")})

        def logs() -> str:
            return (driver_log.read_text(errors="replace")[-4000:] + "\n--- executors ---\n"
                    + "\n".join(cluster.executor_logs(i)[-1500:] for i in range(3)))

        writer = threading.Thread(target=produce_steadily, args=(broker.bootstrap_servers, names["lines"],
                                                                    lines[200:], 60.0), daemon=True)
        try:
            deadline = time.monotonic() + 240
            while not all(offset > 0 for offset in committed(broker.bootstrap_servers, app_id,
                                                             partitions[:2]).values()):
                assert driver.poll() is None, logs()
                assert time.monotonic() < deadline, f"nothing committed:\n{logs()}"
                time.sleep(0.5)
            writer.start()
            while not all(tasks_in(cluster.worker_dir(i), app_id) for i in (0, 1)):  # both executors used
                assert time.monotonic() < deadline, f"a worker got no stream task:\n{logs()}"
                time.sleep(0.5)
            time.sleep(10.0)  # the batch (5 minutes by default) is well under way
            victim = 0
            cluster.kill_worker(victim)
            killed = time.monotonic()
            moved = resumed_after(broker.bootstrap_servers, app_id, partitions, killed, RESUME_WITHIN_S + 30)
            assert len(moved) == len(partitions) and max(moved.values()) <= RESUME_WITHIN_S, (
                f"committed again after the kill (s): {moved}\n{logs()}")
            lost, survivor = tasks_in(cluster.worker_dir(victim), app_id), 1 - victim
            assert lost <= tasks_in(cluster.worker_dir(survivor), app_id), "the lost worker's tasks stayed"

            cluster.start_worker(2)
            started = time.monotonic()
            while not tasks_in(cluster.worker_dir(2), app_id):
                assert driver.poll() is None, logs()
                assert time.monotonic() - started < 180, f"the third worker got no stream task:\n{logs()}"
                time.sleep(0.5)
            print(f"{mode}: committed again after the kill (s): "
                  f"{ {f'{t}-{p}': round(s, 1) for (t, p), s in moved.items()} }; third worker used after "
                  f"{time.monotonic() - started:.1f} s")
            writer.join()
            input_done.touch()
            driver.wait(timeout=300)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)  # spark-submit's JVM and the Python driver it runs
                driver.wait()
        assert driver.returncode == 0, logs()
    expected = Counter(w for _, line in lines for w in line.split())
    updates = read_updates(broker.bootstrap_servers, names["counts"])
    assert {k: v[-1] for k, v in updates.items()} == dict(expected)
    for key, seen in updates.items():
        assert seen == sorted(set(seen)), f"{key}: an update was written twice: {seen}"


def caught_up(bootstrap: str, app_id: str, partitions: list[tuple[str, int]]) -> bool:
    consumer = clients.consumer(bootstrap, group_id=app_id)
    try:
        ends = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), 10)[1] for tp in partitions}
    finally:
        consumer.close()
    return committed(bootstrap, app_id, partitions) == ends


def test_a_standby_replica_takes_over_a_lost_task_with_its_state_warm(broker, topics, tmp_path):
    """``num.standby.replicas=1``: each task's standby lives on the other worker, so when a worker dies
    its tasks reopen on the survivor replaying only what their standbys had not applied yet."""
    names = topics(lines=2, counts=2)
    app_id = f"failover-standby-{uuid.uuid4().hex[:8]}"
    keys = 20_000
    state = [(f"s{i}", " ".join(f"u{5 * i + j}" for j in range(5))) for i in range(keys // 5)]
    rng = random.Random(28)
    steady = [(f"k{i}", " ".join(rng.choices([f"w{i}" for i in range(40)], k=3))) for i in range(1500)]
    produce_lines(broker.bootstrap_servers, names["lines"], steady[:100])
    input_done = tmp_path / "input-done"
    partitions = [(topic, p) for topic in (names["lines"], f"{app_id}-words-repartition") for p in range(2)]
    driver_log = tmp_path / "driver.log"
    with SparkCluster(tmp_path / "cluster", workers=2, cores_per_worker=1) as cluster:
        driver = cluster.submit_background(
            APP, broker.bootstrap_servers, names["lines"], names["counts"], str(tmp_path / "driver-state"),
            app_id, "realtime", str(input_done), STANDBY, output=driver_log,
            conf={"spark.app.name": app_id, "spark.task.maxFailures": "8", "spark.cores.max": "2",
                  "spark.executor.cores": "1", "spark.python.daemon.module": "strom.spark.runtime.daemon"},
            env={"PYTHONPATH": str(ROOT / "tests" / "spark" / "runtime")})

        def logs() -> str:
            return (driver_log.read_text(errors="replace")[-4000:] + "\n--- executors ---\n"
                    + "\n".join(cluster.executor_logs(i)[-1500:] for i in range(2)))

        try:
            deadline = time.monotonic() + 240
            while not all(tasks_in(cluster.worker_dir(i), app_id) for i in (0, 1)):  # both executors used
                assert driver.poll() is None, logs()
                assert time.monotonic() < deadline, f"a worker got no stream task:\n{logs()}"
                time.sleep(0.5)
            produce_lines(broker.bootstrap_servers, names["lines"], state)
            while not caught_up(broker.bootstrap_servers, app_id, partitions):
                assert driver.poll() is None, logs()
                assert time.monotonic() < deadline + 120, f"never caught up:\n{logs()}"
                time.sleep(0.5)
            time.sleep(3.0)  # the standbys read the changelogs every half second
            writer = threading.Thread(target=produce_steadily, args=(broker.bootstrap_servers, names["lines"],
                                                                        steady[100:], 40.0), daemon=True)
            writer.start()
            time.sleep(3.0)
            cluster.kill_worker(0)
            moved = resumed_after(broker.bootstrap_servers, app_id, partitions, time.monotonic(),
                                  RESUME_WITHIN_S + 30)
            assert len(moved) == len(partitions) and max(moved.values()) <= RESUME_WITHIN_S, (
                f"committed again after the kill (s): {moved}\n{logs()}")
            writer.join()
            input_done.touch()
            driver.wait(timeout=300)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait()
        assert driver.returncode == 0, logs()
    progress = json.loads(next(line for line in driver_log.read_text().splitlines()
                               if line.startswith("wordcount progress:")).split(":", 1)[1])
    restored = sum(progress["restored"].values())
    print(f"standby: committed again after the kill (s): {sorted(round(s, 1) for s in moved.values())}; "
          f"restored {restored} of {keys} keys; standbys {progress['standbys']}")
    assert progress["standbys"], "no standby reported"
    metrics = progress["metrics"]
    assert any(line.startswith("strom_standby_task_lag{") for line in metrics), metrics
    assert restored < keys // 10, f"restored {restored} changelog records: the standbys were not used"
    expected = Counter(w for _, line in steady + state for w in line.split())
    updates = read_updates(broker.bootstrap_servers, names["counts"])
    assert {k: v[-1] for k, v in updates.items()} == dict(expected)
    for key, seen in updates.items():
        assert seen == sorted(set(seen)), f"{key}: an update was written twice: {seen}"


def test_two_workers_killed_one_after_the_other(broker, topics, tmp_path):
    """Three workers of one core; two of them SIGKILLed 20 s apart: the last one ends up running every
    task, each loss costing seconds, and every word is counted once."""
    names = topics(lines=2, counts=2)
    app_id = f"failover-twice-{uuid.uuid4().hex[:8]}"
    rng = random.Random(29)
    lines = [(f"k{i}", " ".join(rng.choices([f"w{i}" for i in range(30)], k=3))) for i in range(2000)]
    produce_lines(broker.bootstrap_servers, names["lines"], lines[:100])
    input_done = tmp_path / "input-done"
    partitions = [(topic, p) for topic in (names["lines"], f"{app_id}-words-repartition") for p in range(2)]
    driver_log = tmp_path / "driver.log"
    with SparkCluster(tmp_path / "cluster", workers=3, cores_per_worker=1) as cluster:
        driver = cluster.submit_background(
            APP, broker.bootstrap_servers, names["lines"], names["counts"], str(tmp_path / "driver-state"),
            app_id, "realtime", str(input_done), DEFAULTS, output=driver_log,
            conf={"spark.app.name": app_id, "spark.task.maxFailures": "8", "spark.cores.max": "3",
                  "spark.executor.cores": "1", "spark.python.daemon.module": "strom.spark.runtime.daemon"},
            env={"PYTHONPATH": str(ROOT / "tests" / "spark" / "runtime")})

        def logs() -> str:
            return (driver_log.read_text(errors="replace")[-4000:] + "\n--- executors ---\n"
                    + "\n".join(cluster.executor_logs(i)[-1500:] for i in range(3)))

        writer = threading.Thread(target=produce_steadily, args=(broker.bootstrap_servers, names["lines"],
                                                                    lines[100:], 60.0), daemon=True)
        try:
            deadline = time.monotonic() + 240
            while sum(bool(tasks_in(cluster.worker_dir(i), app_id)) for i in range(3)) < 3:
                assert driver.poll() is None, logs()
                assert time.monotonic() < deadline, f"a worker got no stream task:\n{logs()}"
                time.sleep(0.5)
            writer.start()
            resumed = []
            for victim in (0, 1):
                time.sleep(10.0)
                cluster.kill_worker(victim)
                moved = resumed_after(broker.bootstrap_servers, app_id, partitions, time.monotonic(),
                                      RESUME_WITHIN_S + 30)
                assert len(moved) == len(partitions) and max(moved.values()) <= RESUME_WITHIN_S, (
                    f"after killing worker {victim}, committed again after (s): {moved}\n{logs()}")
                resumed.append(round(max(moved.values()), 1))
            print(f"two losses: every partition committed again after {resumed} s")
            writer.join()
            input_done.touch()
            driver.wait(timeout=300)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait()
        assert driver.returncode == 0, logs()
        assert tasks_in(cluster.worker_dir(2), app_id) == {"0_0", "0_1", "1_0", "1_1"}
    expected = Counter(w for _, line in lines for w in line.split())
    updates = read_updates(broker.bootstrap_servers, names["counts"])
    assert {k: v[-1] for k, v in updates.items()} == dict(expected)
    for key, seen in updates.items():
        assert seen == sorted(set(seen)), f"{key}: an update was written twice: {seen}"
