"""Losing a worker while its stream task holds a lot of state, with and without standby replicas.

    .venv/bin/python bench/failover.py [--keys 1000000] [--standbys 0,1]

A Spark standalone cluster on loopback (tests/support/spark_cluster.py: a master and two workers of one
core each, ``spark.cores.max=2``, ``spark.task.maxFailures=8``) runs a count by key (RocksDB store with
its changelog) over a 2-partition topic under exactly_once_v2 with the runtime's defaults (real-time
mode, 5-minute batches, ``num.stream.threads`` from the slots): two stream threads, one task each, each
task holding half of ``--keys`` keys. Once everything is committed (and the standbys have had 5 s to
catch up) a trickle of input starts and worker 0 is SIGKILLed with its executor and Python workers.
Measured from the kill, per ``num.standby.replicas``:

- detection: the driver ends the batch (its log line "ending the batch early");
- reassignment: the next batch's tasks are assigned (its log line);
- first commit: the lost task's input partition committed again (seen from outside, as a consumer
  of the group's offsets sees it);
- restored: changelog records the moved task replayed (``progress.tasks[t].restored``).

``python bench/failover.py app ...`` is the application the benchmark submits.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # support.spark_cluster

PROGRESS = "failover progress:"


def app_main(bootstrap: str, topic: str, state_dir: str, app_id: str, standbys: str, done: str) -> None:
    """The application: counts by key until ``done`` exists, printing its figures every second."""
    logging.basicConfig(format="%(created).3f %(name)s %(levelname)s %(message)s", level=logging.WARNING)
    logging.getLogger("strom.spark.runtime").setLevel(logging.INFO)
    from pyspark.sql import SparkSession

    from strom.spark.runtime import SparkStreams
    from strom.streams import Consumed, Grouped, Materialized, Serdes, StreamsBuilder

    s = Serdes.String()
    builder = StreamsBuilder()
    builder.stream(topic, Consumed.with_(s, s)).group_by_key(Grouped.with_(s, s)).count(
        materialized=Materialized.as_("counts"))
    spark = SparkSession.builder.getOrCreate()
    app = SparkStreams(builder.build(), {
        "application.id": app_id, "bootstrap.servers": bootstrap, "state.dir": state_dir,
        "processing.guarantee": "exactly_once_v2", "num.standby.replicas": int(standbys)}, spark)
    app.start()
    try:
        while not os.path.exists(done):
            time.sleep(1.0)
            threads = {t.pid: t.active_tasks for t in app.metadata_for_local_threads()
                       if t.thread_state == "RUNNING"}
            print(PROGRESS, json.dumps({
                "time": time.time(), "restored": {t: p.restored for t, p in app.progress.tasks.items()},
                "threads": threads, "lag": app.lag(),
                "standbys": {k: s.lag for k, s in app.progress.standbys.items()}}), flush=True)
    finally:
        app.stop()
        spark.stop()


def _progress(log: Path) -> list[dict]:
    return [json.loads(line.split(":", 1)[1]) for line in log.read_text(errors="replace").splitlines()
            if line.startswith(PROGRESS)]


def _logged(log: Path, text: str, after: float) -> float | None:
    """``time.time()`` of the first driver log line after ``after`` containing ``text``."""
    for line in log.read_text(errors="replace").splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            when = float(stamp)
        except ValueError:
            continue
        if when > after and text in rest:
            return when
    return None


def _committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    from confluent_kafka import TopicPartition

    from strom.kafka import clients

    consumer = clients.consumer(bootstrap, group_id=group)
    try:
        return {(tp.topic, tp.partition): tp.offset
                for tp in consumer.committed([TopicPartition(t, p) for t, p in partitions], 10)}
    finally:
        consumer.close()


def run(bootstrap: str, keys: int, standbys: int, workdir: Path) -> dict:
    from strom.kafka import clients
    from strom.kafka.clients import JAVA_PARTITIONER
    from support.kafka import produce
    from support.spark_cluster import SparkCluster

    topic = f"failover-{uuid.uuid4().hex[:8]}"
    app_id = f"failover-bench-{standbys}-{uuid.uuid4().hex[:8]}"
    clients.create_topics(bootstrap, {topic: 2})
    done = workdir / f"{app_id}.done"
    log = workdir / f"{app_id}.log"
    with SparkCluster(workdir / app_id, workers=2, cores_per_worker=1) as cluster:
        driver = cluster.submit_background(
            __file__, "app", bootstrap, topic, str(workdir / app_id / "driver-state"), app_id, str(standbys),
            str(done), output=log,
            conf={"spark.app.name": app_id, "spark.task.maxFailures": "8", "spark.cores.max": "2",
                  "spark.executor.cores": "1", "spark.python.daemon.module": "strom.spark.runtime.daemon"})
        try:
            def threads() -> dict:
                rows = _progress(log)
                return rows[-1]["threads"] if rows else {}

            deadline = time.monotonic() + 300
            while len(threads()) < 2:
                if driver.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"two stream threads never ran:\n{log.read_text()[-3000:]}")
                time.sleep(1.0)
            started = time.monotonic()
            for start in range(0, keys, 100_000):
                chunk = range(start, min(keys, start + 100_000))
                produce(bootstrap, topic, ((f"key-{i}", "1") for i in chunk), **JAVA_PARTITIONER)
            produced = time.monotonic() - started
            produced_at = time.time()
            while not (rows := _progress(log)) or rows[-1]["time"] < produced_at or rows[-1]["lag"] != 0:
                if driver.poll() is not None:
                    raise RuntimeError(log.read_text()[-3000:])
                time.sleep(1.0)
            processed = time.monotonic() - started
            time.sleep(5.0)  # standbys catch up (they read the changelogs every half second)
            before = _progress(log)[-1]
            victim_pids = [int(pid) for pid in before["threads"] if cluster.worker_of(int(pid)) == 0]
            if not victim_pids:
                raise RuntimeError(f"no stream thread found on worker 0: {before['threads']}")
            lost = before["threads"][str(victim_pids[0])]
            partitions = [(topic, int(task.split("_")[1])) for task in lost]
            stop_trickle = threading.Event()

            def trickle() -> None:
                i = 0
                while not stop_trickle.is_set():
                    batch = [(f"key-{j}", "1") for j in range(i, i + 50)]
                    produce(bootstrap, topic, batch, **JAVA_PARTITIONER)
                    i += 50
                    time.sleep(0.1)

            writer = threading.Thread(target=trickle, daemon=True)
            writer.start()
            time.sleep(2.0)
            killed = time.time()
            cluster.kill_worker(0)
            time.sleep(0.3)  # a commit the lost task sent just before it died lands
            base = _committed(bootstrap, app_id, partitions)
            first_commit = None
            while first_commit is None and time.time() - killed < 600:
                if any(o > base[tp] for tp, o in _committed(bootstrap, app_id, partitions).items()):
                    first_commit = time.time() - killed
                time.sleep(0.1)
            stop_trickle.set()
            writer.join()
            time.sleep(3.0)
            after = _progress(log)[-1]
            done.touch()
            driver.wait(timeout=120)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, 9)
                driver.wait()
    detected = _logged(log, "ending the batch early", killed)
    assigned = _logged(log, "tasks assigned", detected or killed)
    restored = sum(after["restored"].get(t, 0) - before["restored"].get(t, 0) for t in lost)
    return {"standbys": standbys, "keys": keys, "lost": lost, "produce_s": produced, "process_s": processed,
            "detection_s": None if detected is None else detected - killed,
            "reassignment_s": None if assigned is None else assigned - killed,
            "first_commit_s": first_commit, "restored": restored,
            "state_of_lost": keys // 2 * len(lost), "standby_lag_before": before["standbys"]}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "app":
        app_main(*sys.argv[2:8])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--standbys", default="0,1", help="num.standby.replicas values, comma-separated")
    args = parser.parse_args()
    from machine import describe
    from strom.broker import EmbeddedBroker

    print(describe(), flush=True)
    results = []
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="strom-failover-") as workdir:
        for standbys in (int(v) for v in args.standbys.split(",")):
            result = run(broker.bootstrap_servers, args.keys, standbys, Path(workdir))
            print(json.dumps(result), flush=True)
            results.append(result)
    print(f"\n{args.keys:,} keys over 2 tasks; worker 0 SIGKILLed; seconds from the kill")
    print("| num.standby.replicas | detection s | reassignment s | first commit of the moved task s | "
          "records restored | state of the moved task (about) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"
        print(f"| {r['standbys']} | {fmt(r['detection_s'])} | {fmt(r['reassignment_s'])} | "
              f"{fmt(r['first_commit_s'])} | {r['restored']:,} | {r['state_of_lost']:,} keys |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
