"""`spark-submit --master spark://...` of an application calling SparkStreams, on a standalone cluster of
a worker started from pyspark's own spark-class; the output is read read_committed (docs/deploy.md)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from strom.kafka import clients
from support.spark_cluster import SparkCluster

from .test_run import EXPECTED, _env, _produce, read_counts

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "word_count_app.py"

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.broker]


def test_spark_submit_runs_a_strom_application_on_a_standalone_cluster(broker, tmp_path):
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    lines, counts = f"submit-lines-{suffix}", f"submit-counts-{suffix}"
    clients.create_topics(bootstrap, {lines: 2, counts: 2})
    _produce(bootstrap, lines)
    env = {**_env(tmp_path, f"submit-{suffix}", lines=lines, counts=counts), "WORD_COUNT_TIMEOUT_S": "150"}
    with SparkCluster(tmp_path / "cluster", workers=1, cores_per_worker=2) as cluster:
        result = cluster.submit(APP, bootstrap, env=env, timeout=240, conf={
            "spark.app.name": f"word-count-{suffix}",
            "spark.python.daemon.module": "strom.spark.runtime.daemon",
            "spark.task.maxFailures": "4"})
        assert result.returncode == 0, result.stderr[-4000:] + cluster.executor_logs(0)[-2000:]
        assert f"word-count-{suffix}" in cluster.applications()
        assert list((cluster.worker_dir(0) / "work").glob("app-*/*/stderr")), "no executor ran"
    assert read_counts(bootstrap, counts) == EXPECTED
