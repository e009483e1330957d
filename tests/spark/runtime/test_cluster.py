"""A real Spark standalone cluster (a master and two workers from pyspark's own spark-class, each
worker with a state directory of its own, as on two machines) runs a word count with a repartition
step in real-time mode while lines keep arriving; one worker is SIGKILLed with its executor and
Python workers. Spark retries its stream thread on the other worker, whose tasks restore their
stores from the changelogs and fence the dead attempts: read_committed, every word is counted
exactly once."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from support.spark_cluster import SparkCluster

from .cluster_wordcount import committed, tasks_in
from .conftest import produce_lines, produce_steadily, read_updates

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

APP = Path(__file__).with_name("wordcount.py")
ROOT = Path(__file__).resolve().parents[3]


def _committed(bootstrap: str, app_id: str, topic: str) -> int:
    return sum(max(0, offset) for offset in committed(bootstrap, app_id, [(topic, 0), (topic, 1)]).values())


def test_a_worker_killed_mid_run_loses_and_repeats_no_word(broker, topics, tmp_path):
    names = topics(lines=2, counts=2)
    app_id = f"rt-cluster-{uuid.uuid4().hex[:8]}"
    rng = random.Random(5)
    words = [f"w{i}" for i in range(15)]
    lines = [(f"k{i}", " ".join(rng.choices(words, k=rng.randint(1, 4)))) for i in range(1500)]
    produce_lines(broker.bootstrap_servers, names["lines"], lines[:200])
    input_done = tmp_path / "input-done"
    with SparkCluster(tmp_path / "cluster", workers=2, cores_per_worker=2) as cluster:
        driver = cluster.submit_background(
            APP, broker.bootstrap_servers, names["lines"], names["counts"], str(tmp_path / "driver-state"),
            app_id, "realtime", str(input_done),
            conf={"spark.app.name": app_id, "spark.task.maxFailures": "8",
                  "spark.python.daemon.module": "strom.spark.runtime.daemon"},
            env={"PYTHONPATH": str(ROOT / "tests" / "spark" / "runtime")})
        try:
            deadline = time.monotonic() + 240  # a loaded 2-core host took over 150 s to start it all
            while _committed(broker.bootstrap_servers, app_id, names["lines"]) == 0:
                assert driver.poll() is None, driver.communicate()[1][-4000:]
                assert time.monotonic() < deadline, f"nothing committed: {cluster.executor_logs(0)[-3000:]}"
                time.sleep(0.5)
            writer = threading.Thread(target=produce_steadily, args=(broker.bootstrap_servers, names["lines"],
                                                                        lines[200:], 6.0))
            writer.start()
            time.sleep(2.0)
            victim = next(i for i in (0, 1) if tasks_in(cluster.worker_dir(i), app_id))
            cluster.kill_worker(victim)
            writer.join()
            input_done.touch()
            _, stderr = driver.communicate(timeout=240)
        finally:
            if driver.poll() is None:
                driver.kill()
        survivor = 1 - victim
        assert driver.returncode == 0, stderr[-4000:] + cluster.executor_logs(survivor)[-3000:]
        moved = tasks_in(cluster.worker_dir(victim), app_id)
        assert moved <= tasks_in(cluster.worker_dir(survivor), app_id), "the lost worker's tasks stayed"
    expected = Counter(w for _, line in lines for w in line.split())
    updates = read_updates(broker.bootstrap_servers, names["counts"])
    assert {k: v[-1] for k, v in updates.items()} == dict(expected)
    for key, seen in updates.items():
        assert seen == sorted(set(seen)), f"{key}: an update was written twice: {seen}"
