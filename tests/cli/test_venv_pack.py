"""docs/deploy.md's path to a Spark cluster, run as written: strom's wheel installed into a fresh venv,
packed with venv-pack, shipped with `spark-submit --archives` to a standalone cluster that has only Spark
(no Python of this venv), executors running the unpacked environment's Python.

PACK and SUBMIT are the doc's commands verbatim (a fast test checks deploy.md shows them); the slow test
runs them with this checkout's path, the cluster's master URL and the broker's address put in, and the
cluster's loopback settings added to spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from importlib.metadata import version
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from strom.kafka import clients
from support.spark_cluster import without_this_venv

from .test_run import EXPECTED, LINES, _produce, read_counts

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "deploy.md"
WHEEL = f"strom-{version('strom')}-py3-none-any.whl"
PACK = f"""\
python3 -m pip wheel --no-deps -w dist path/to/strom
python3 -m venv strom-env
strom-env/bin/pip install "dist/{WHEEL}[spark]" venv-pack -c path/to/strom/constraints.txt
strom-env/bin/venv-pack -p strom-env -o strom-env.tar.gz --exclude 'lib/python*/site-packages/pyspark/jars/*'
"""
SUBMIT = """\
export PYSPARK_DRIVER_PYTHON=strom-env/bin/python
export PYSPARK_PYTHON=./environment/bin/python
strom-env/bin/spark-submit --master spark://spark-master:7077 \\
  --archives strom-env.tar.gz#environment \\
  --conf spark.python.daemon.module=strom.spark.runtime.daemon \\
  --conf spark.task.maxFailures=4 \\
  app.py kafka-1:9092,kafka-2:9092
"""
# The word count of docs/deploy.md, plus a branch recording, per input record, the Python that ran its task.
APP = """\
import json
import sys

from pyspark.sql import SparkSession

import strom
from strom.spark.runtime import SparkStreams
from strom.streams import Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder

S, L = Serdes.String(), Serdes.Long()


def where(line):
    return json.dumps({{"executable": sys.executable, "prefix": sys.prefix, "strom": strom.__file__}})


def build():
    builder = StreamsBuilder()
    lines = builder.stream({lines!r}, Consumed.with_(S, S))
    lines.map_values(where).to({places!r}, Produced.with_(S, S))
    (lines.flat_map_values(str.split)
        .group_by(lambda key, word: word, Grouped.as_("words").with_key_serde(S).with_value_serde(S))
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to({counts!r}, Produced.with_(S, L)))
    return builder.build(), {{"application.id": {app_id!r}, "processing.guarantee": "exactly_once_v2",
                              "commit.interval.ms": 500, "state.dir": {state_dir!r}}}


if __name__ == "__main__":
    spark = SparkSession.builder.getOrCreate()
    topology, props = build()
    with SparkStreams(topology, {{**props, "bootstrap.servers": sys.argv[1]}}, spark) as app:
        if not app.wait_until_caught_up(timeout=150):
            sys.exit("the application did not catch up in time")
    spark.stop()
"""


def test_deploy_doc_shows_the_commands_this_test_runs():
    text = DOC.read_text()
    assert PACK in text and SUBMIT in text


def _shell(script: str, cwd: Path, env: dict[str, str], timeout: float) -> float:
    """Runs ``script`` with bash (stopping at the first failing command); returns its seconds."""
    started = time.monotonic()
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{script}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return time.monotonic() - started


@pytest.fixture(scope="session")
def packed_env(tmp_path_factory) -> Path:
    """A directory holding strom-env (a venv with strom's wheel) and strom-env.tar.gz, built once."""
    work = tmp_path_factory.mktemp("deploy")
    env = without_this_venv(os.environ)  # python3 is the machine's, as for a user
    seconds = _shell(PACK.replace("path/to/strom", str(ROOT)), work, env, timeout=900)
    print(f"\nwheel, venv, install and venv-pack took {seconds:.0f} s")
    assert (work / "strom-env.tar.gz").is_file()
    return work


def _records(bootstrap: str, topic: str, timeout: float = 60.0) -> list[str]:
    """Every value of ``topic``, read read_committed to the end of every partition."""
    consumer = clients.consumer(bootstrap, **{"enable.partition.eof": True})
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end = [], set()
    deadline = time.monotonic() + timeout
    while len(at_end) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.5):
            if message.error() is None:
                values.append(message.value().decode())
            elif message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
    consumer.close()
    return values


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.broker
@pytest.mark.timeout(900)  # building the environment (about 90 s) counts too, then the cluster and the run
def test_a_venv_packed_environment_runs_the_executors_of_a_spark_submit(broker, cluster, packed_env,
                                                                             tmp_path):
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:8]
    app_id, lines, counts, places = (f"packed-{suffix}", f"packed-lines-{suffix}", f"packed-counts-{suffix}",
                                     f"packed-places-{suffix}")
    clients.create_topics(bootstrap, {lines: 2, counts: 2, places: 2})
    _produce(bootstrap, lines)
    (packed_env / "app.py").write_text(APP.format(lines=lines, counts=counts, places=places, app_id=app_id,
                                                  state_dir=str(tmp_path / "state")))
    loopback = " ".join(f"--conf {key}={value}" for key, value in cluster.driver_conf().items())
    submit = (SUBMIT.replace("spark://spark-master:7077", f"{cluster.master_url} {loopback}")
              .replace("kafka-1:9092,kafka-2:9092", bootstrap))
    seconds = _shell(submit, packed_env, cluster.env, timeout=400)
    print(f"\nspark-submit with the archive took {seconds:.0f} s")
    assert "app.py" in cluster.applications()  # spark-submit names it after the file
    work = (cluster.worker_dir(0) / "work").resolve()
    assert read_counts(bootstrap, counts) == EXPECTED
    places_seen = [json.loads(value) for value in _records(bootstrap, places)]
    assert len(places_seen) == len(LINES)  # one per input line, exactly once
    for place in places_seen:
        prefix = Path(place["prefix"])
        assert prefix.name == "environment" and work in prefix.resolve().parents, place
        assert place["executable"].endswith("environment/bin/python"), place
        assert Path(place["strom"]).resolve().is_relative_to(prefix.resolve()), place
        assert not Path(place["strom"]).is_relative_to(ROOT), place
