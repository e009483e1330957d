"""The word-count topology of the runtime tests.

Also a script: ``python wordcount.py BOOTSTRAP LINES COUNTS STATE_DIR APP_ID MODE [INPUT_DONE [PROPS]]``
runs the topology exactly-once on Spark (local, or the master spark-submit gives it) until every input
record is committed (after the file INPUT_DONE exists, when given), for the SIGKILL tests. PROPS, a JSON
object, overrides the test-friendly settings (a ``null`` value drops the key: its default applies). Once
caught up it prints ``PROGRESS`` and a JSON object: the records each task restored, its standbys.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from strom.streams import Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder, Topology

S, L = Serdes.String(), Serdes.Long()
PROGRESS = "wordcount progress:"
INPUT_WAIT_S = 600.0
"""How long the script waits for INPUT_DONE (a test that died leaves no driver behind for long)."""


def word_count(lines: str, counts: str) -> Topology:
    """Lines → words, re-keyed by word (repartition topic) → count (RocksDB store, changelog)."""
    builder = StreamsBuilder()
    (builder.stream(lines, Consumed.with_(S, S))
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, Grouped.as_("words").with_key_serde(S).with_value_serde(S))
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to(counts, Produced.with_(S, L)))
    return builder.build()


def _standby_metrics(url: str) -> list[str]:
    """The standby lag lines its Prometheus endpoint serves."""
    with urllib.request.urlopen(url, timeout=30) as response:
        lines = response.read().decode().splitlines()
    return [line for line in lines if line.startswith("strom_standby_task_lag")]


def main(bootstrap: str, lines: str, counts: str, state_dir: str, app_id: str, mode: str,
         input_done: str = "", overrides: str = "{}", build: Callable[[str, str], Topology] = word_count,
         waiting: Callable[[Any], None] | None = None) -> None:
    """Runs ``build(lines, counts)``; ``waiting(app)`` is called every 0.1 s until INPUT_DONE exists."""
    import strom.spark
    from strom.spark.runtime import SparkStreams

    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit's JVM launched this driver
    spark = (SparkSession.builder.getOrCreate() if submitted
             else strom.spark.session(app_name="strom-runtime-kill", log_level="ERROR"))
    props = {
        "application.id": app_id, "bootstrap.servers": bootstrap, "state.dir": state_dir,
        "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 100,
        "max.offsets.per.trigger": 120, "execution.mode": mode, "realtime.batch.duration.ms": 2000,
        **({"num.stream.threads": 2} if mode == "realtime" else {}), **json.loads(overrides)}
    app = SparkStreams(build(lines, counts), {k: v for k, v in props.items() if v is not None}, spark)
    app.start()
    deadline = time.monotonic() + INPUT_WAIT_S
    while input_done and not os.path.exists(input_done) and time.monotonic() < deadline:
        if waiting is not None:
            waiting(app)
        time.sleep(0.1)
    caught_up = app.wait_until_caught_up(max(1.0, deadline - time.monotonic()))
    print(PROGRESS, json.dumps({  # for the tests that read this driver's output
        "metrics": _standby_metrics(app.metrics_url) if app.metrics_url else [],
        "restored": {task: p.restored for task, p in app.progress.tasks.items()},
        "standbys": {key: {"lag": standby.lag, "restored": standby.restored}
                     for key, standby in app.progress.standbys.items()}}),
        flush=True)
    app.stop()
    spark.stop()
    sys.exit(0 if caught_up else 3)


if __name__ == "__main__":
    main(*sys.argv[1:9])
