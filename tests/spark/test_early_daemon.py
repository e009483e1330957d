"""The Python worker daemon a local session starts beside its JVM (strom.spark.early_daemon): the first
pool's workers fork from it, with what a daemon Spark started itself would have (a second pool's
shows it), and nothing of it outlives the session."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SESSION = """
import json, os, sys
import strom.spark

def seen(_):
    import os, sys
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as daemon:
        command = daemon.read().replace(b"\\0", b" ").decode()
    settings = {k: v for k, v in os.environ.items() if k.startswith("PYTHON") and "SECRET" not in k}
    return json.dumps({"daemon": command, "path": sys.path, "settings": settings,
                       "loaded": "strom.spark.runtime.spark_streams" in sys.modules})

spark = strom.spark.session(app_name="strom-early-daemon-test", strom_format=False)
context = spark.sparkContext
address = context.environment["STROM_EARLY_DAEMON"]
first = json.loads(context.parallelize([0], 1).map(seen).collect()[0])
context.environment["STROM_TEST_POOL"] = "second"  # another environment: another pool, another daemon
second = json.loads(context.parallelize([0], 1).map(seen).collect()[0])
spark.stop()
print(json.dumps({"address": address, "first": first, "second": second}))
"""


def _named(text: str) -> list[str]:
    found = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in found.splitlines() if text in line]


def test_the_first_workers_fork_from_the_early_daemon_as_from_one_spark_starts():
    import json

    result = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    first, second = seen["first"], seen["second"]
    assert f"-m strom.spark.early_daemon --wait {seen['address']}" in first["daemon"]
    assert "-m strom.spark.early_daemon pyspark.worker" in second["daemon"]  # ran the daemon itself
    assert first["loaded"] and second["loaded"]
    assert first["path"] == second["path"] and first["settings"] == second["settings"]
    assert _named(seen["address"]) == []  # the daemon and its stand-in ended with the session
