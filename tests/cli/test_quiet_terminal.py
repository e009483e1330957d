"""What a newcomer's terminal shows: strom's Spark sessions print none of Spark's, Hadoop's or the JVM's
start-up notices (strom.spark.quiet_logging), while a warning a user can act on still reaches stderr,
and ``quiet=False`` (``strom -v``) gives Spark's own logging back."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from strom.kafka import clients
from support.processes import STROM

from .test_run import SPARK_CHATTER

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MEMORY_WARNING = "Not enough space to cache rdd_1_0 in memory! (computed 512.0 MiB so far)"
SESSION = """
import strom.spark
spark = strom.spark.session(app_name="strom-quiet-test", quiet={quiet})
log = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger(
    "org.apache.spark.storage.memory.MemoryStore")
log.warn("{warning}")
log.warn("Incomplete task interrupted: Attempting to kill Python Worker - task 1.0 in stage 0 (TID 1)")
spark.stop()
"""
CANCELLED = "Incomplete task interrupted"
"""What Spark says of each task of a job strom cancels on stopping."""


def _chatter(output: str) -> list[str]:
    return [line for line in output.splitlines() for chatter in SPARK_CHATTER if chatter in line]


def test_strom_demo_prints_no_spark_start_up_chatter():
    result = subprocess.run([STROM, "demo", "--records", "2000", "--timeout", "150"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verification" in result.stdout and "OK" in result.stdout
    assert _chatter(result.stdout + result.stderr) == []


def test_a_quiet_session_still_shows_an_actionable_spark_warning():
    result = subprocess.run([sys.executable, "-c", SESSION.format(quiet=True, warning=MEMORY_WARNING)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"WARN MemoryStore: {MEMORY_WARNING}" in result.stderr
    assert _chatter(result.stderr) == [] and CANCELLED not in result.stderr


LATER_QUIET = """
spark = strom.spark.session(app_name="strom-quiet-test")  # as an app under spark-submit: the JVM runs
utils = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger("org.apache.spark.util.Utils")
utils.warn("Your hostname, test, resolves to a loopback address: 127.0.0.1; using 10.0.0.1 instead")
log.warn("still shown: {warning}")
spark.stop()
"""


def test_a_verbose_session_keeps_spark_s_own_logging_and_a_later_quiet_one_applies_strom_s():
    script = SESSION.format(quiet=False, warning=MEMORY_WARNING).replace("spark.stop()\n", "")
    result = subprocess.run([sys.executable, "-c", script + LATER_QUIET.format(warning=MEMORY_WARNING)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Using Spark's default log4j profile" in result.stderr
    assert MEMORY_WARNING in result.stderr
    assert f"still shown: {MEMORY_WARNING}" in result.stderr  # reconfigured, warnings still pass
    assert "test, resolves to a loopback address" not in result.stderr


API_APP = """
import os, sys, time
import strom.spark
from strom.kafka import clients
from strom.spark.runtime import SparkStreams
from strom.streams import Consumed, Produced, Serdes, StreamsBuilder
S = Serdes.String()
bootstrap, topic, state = sys.argv[1:]
STALLED = os.path.join(state, "stalled")

def stall(value):  # the processor is in a call that outlasts the stop's grace: strom cancels the job
    if value == "stall":
        open(STALLED, "w").close()
        time.sleep(600)
    return value

spark = strom.spark.session(app_name="strom-api-stop", quiet=False, strom_format=False)  # Spark's logging
producer = clients.producer(bootstrap)
for value in ("a", "stall"):
    producer.produce(topic, value.encode())
assert producer.flush(30) == 0
builder = StreamsBuilder()
builder.stream(topic, Consumed.with_(S, S)).map_values(stall).to(f"{topic}-out", Produced.with_(S, S))
app = SparkStreams(builder.build(), {"application.id": topic, "bootstrap.servers": bootstrap,
                                     "state.dir": state, "execution.mode": "realtime"}, spark)
app.start()
deadline = time.monotonic() + 240
while not os.path.exists(STALLED):
    assert time.monotonic() < deadline, "the processor never stalled"
    time.sleep(0.2)
app.stop()
print("stopped", file=sys.stderr, flush=True)
time.sleep(5)  # the session lives on, as a user's does: Spark's account of the killed task comes later
"""


@pytest.mark.broker
@pytest.mark.timeout(600)
def test_stopping_from_the_python_api_prints_no_task_kills(broker, tmp_path):
    """``SparkStreams.stop()`` in a session whose logging is Spark's own (``quiet=False``, as a session
    of the user's or ``strom -v``), of an application whose processor is stuck in a call: strom cancels
    the stream threads' job after its grace, and Spark's ``WARN Lost task ... TaskKilled``
    for the tasks strom kills is not printed, also when Spark reports the kill after ``stop()``."""
    topic = f"api-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers, {topic: 1, f"{topic}-out": 1})
    result = subprocess.run([sys.executable, "-c", API_APP, broker.bootstrap_servers, topic, str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "stopped" in result.stderr, result.stderr[-3000:]
    assert "Attempting to kill Python Worker" in result.stderr, result.stderr[-3000:]  # strom killed it
    assert "1 stream thread(s) still running 30 s after the batch's end (a processor stuck in a call?)" \
        in result.stderr, result.stderr[-3000:]  # and said why, once
    assert "TaskKilled" not in result.stderr and "Lost task" not in result.stderr, result.stderr[-3000:]
