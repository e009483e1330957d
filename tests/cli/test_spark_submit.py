"""Applications on a Spark standalone cluster (a master and a worker started from pyspark's own
spark-class on loopback): `spark-submit --master spark://...` of an app calling SparkStreams, and
`strom run --master spark://...`; outputs read read_committed (docs/deploy.md)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from strom.kafka import clients
from support.processes import STROM

from .test_run import EXPECTED, STATUS, _env, _produce, read_counts

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "word_count_app.py"

PYTHON = {"spark.pyspark.python": sys.executable}  # this venv on every node: deploy.md's "same path" case

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.broker]


def _topics(bootstrap: str, prefix: str) -> tuple[str, str, str]:
    suffix = uuid.uuid4().hex[:8]
    lines, counts = f"{prefix}-lines-{suffix}", f"{prefix}-counts-{suffix}"
    clients.create_topics(bootstrap, {lines: 2, counts: 2})
    _produce(bootstrap, lines)
    return f"{prefix}-{suffix}", lines, counts


def test_spark_submit_runs_a_strom_application_on_a_standalone_cluster(broker, cluster, tmp_path):
    bootstrap = broker.bootstrap_servers
    app_id, lines, counts = _topics(bootstrap, "submit")
    env = {**_env(tmp_path, app_id, lines=lines, counts=counts), "WORD_COUNT_TIMEOUT_S": "150"}
    executors_before = set((cluster.worker_dir(0) / "work").glob("app-*/*/stderr"))
    result = cluster.submit(APP, bootstrap, env=env, timeout=240, conf={
        **PYTHON,
        "spark.app.name": app_id,
        "spark.python.daemon.module": "strom.spark.runtime.daemon",
        "spark.task.maxFailures": "4"})
    assert result.returncode == 0, result.stderr[-4000:] + cluster.executor_logs(0)[-2000:]
    assert app_id in cluster.applications()
    assert set((cluster.worker_dir(0) / "work").glob("app-*/*/stderr")) - executors_before, "no executor ran"
    assert read_counts(bootstrap, counts) == EXPECTED


def test_strom_run_with_a_spark_master_url_runs_on_the_cluster(broker, cluster, tmp_path):
    bootstrap = broker.bootstrap_servers
    app_id, lines, counts = _topics(bootstrap, "clusterrun")
    spark_conf = [arg for key, value in {**cluster.driver_conf(), **PYTHON}.items()
                  for arg in ("--spark-conf", f"{key}={value}")]
    result = subprocess.run(
        [STROM, "run", str(APP), "--bootstrap-servers", bootstrap, "--master", cluster.master_url,
         *spark_conf, "--until-caught-up", "--status-interval", "2"],
        env={**cluster.env, **_env(tmp_path, app_id, lines=lines, counts=counts)},
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]
    assert STATUS.search(result.stderr) and "caught up" in result.stderr and "stopped" in result.stderr
    assert f"strom-{app_id}" in cluster.applications()
    assert read_counts(bootstrap, counts) == EXPECTED
