"""Scaling on one machine: bench/pipeline.py's count-by-key with 1 and 2 stream threads (issue 29).

    python bench/scaling.py [--records 200000] [--keys 10000] [--partitions 4] [--threads 1,2] [--repeat 2]

One Spark session (local[2]) and one embedded broker in this process; for each round and each
``num.stream.threads`` (interleaved, so both see the same load), fresh topics hold ``--records``
records before ``SparkStreams(..., {"execution.mode": "realtime", "num.stream.threads": N})`` starts.

  rate        records / (last commit - first record processed), as bench/pipeline.py measures it.
  worker cpu  CPU seconds of the Spark Python workers (the stream threads) over that span, per
              million records: the work that should not grow with threads.
  all cpu     the same for every process of the run (this one with the broker and the driver, the
              JVM, the workers), per million records.
  ratio       rate with N threads / rate with 1 thread within a round; the summary gives medians.

Targets (issue 29): ratio >= 1.8x at 2 threads, CPU per record within 10%. The host has 2 cores shared
with the broker, the driver's JVM and other users: the first line gives the load average (above 2,
the threads wait for a core and the ratio says more about the host than about strom).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from machine import describe
from pipeline import (
    StromContestant,
    Topics,
    end_offsets,
    fill,
    fresh_topics,
    input_producer,
    wait_committed,
)
from strom.broker import EmbeddedBroker

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_tree() -> dict[int, tuple[str, float]]:
    """This process and its descendants: pid -> (command, CPU seconds including reaped children)."""
    stats: dict[int, tuple[int, str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        cpu = sum(int(f) for f in fields[11:15]) / CLOCK_TICKS  # utime stime cutime cstime
        stats[int(entry.name)] = (int(fields[1]), command, cpu)
    tree, frontier = {}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        if pid in stats:
            tree[pid] = (stats[pid][1], stats[pid][2])
            frontier.extend(child for child, (parent, _, _) in stats.items() if parent == pid)
    return tree


def cpu_split() -> tuple[float, float]:
    """(CPU seconds of the Python workers and their daemon, of the whole tree)."""
    tree = process_tree()
    workers = sum(cpu for command, cpu in tree.values() if "strom.spark.runtime.daemon" in command
                  or "pyspark.daemon" in command)
    total = sum(cpu for pid, (_, cpu) in tree.items())
    return workers, total


class ThreadsContestant(StromContestant):
    def __init__(self, spark: object, threads: int, state_dir: str) -> None:
        super().__init__(spark, "realtime", state_dir)
        self.props = {**self.props, "num.stream.threads": str(threads)}
        self.label = f"strom realtime, {threads} stream thread{'s' if threads > 1 else ''}"
        self.threads = threads


def run_one(bootstrap: str, spark: object, threads: int, args: argparse.Namespace, workdir: str) -> dict:
    contestant = ThreadsContestant(spark, threads, workdir)
    topics: Topics = fresh_topics(bootstrap, f"scaling{threads}", args.partitions)
    producer = input_producer(bootstrap)
    fill(producer, topics.source, 0, args.records, args.keys)
    ends = end_offsets(bootstrap, topics)
    mark = f"{workdir}/{contestant.group}.first"
    workers_before, total_before = cpu_split()
    contestant.start(bootstrap, topics, mark)
    try:
        done = wait_committed(bootstrap, contestant, topics, ends)
        workers_after, total_after = cpu_split()
        started = float(Path(mark).read_text())
        threads_run = contestant._app.num_stream_threads if contestant._app else 0
    finally:
        contestant.stop()
    span = done - started
    millions = args.records / 1e6
    return {"threads": threads, "threads_run": threads_run, "rate": args.records / span,
            "worker_cpu": (workers_after - workers_before) / millions,
            "all_cpu": (total_after - total_before) / millions, "span": span}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--threads", default="1,2", help="num.stream.threads values, comma-separated")
    parser.add_argument("--repeat", type=int, default=2, help="interleaved rounds; the summary gives medians")
    args = parser.parse_args()
    counts = [int(n) for n in args.threads.split(",")]
    print(describe(), flush=True)
    import strom.spark

    # Spark's Python workers inherit the driver's environment: let them import bench/pipeline.py,
    # whose functions the topology refers to
    bench = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (bench, os.environ.get("PYTHONPATH")) if p)
    workdir = tempfile.mkdtemp(prefix="strom-bench-scaling-")
    spark = strom.spark.session(app_name="strom-bench-scaling", master="local[2]", log_level="ERROR")
    results: dict[int, list[dict]] = {n: [] for n in counts}
    with EmbeddedBroker() as broker:
        warm = ThreadsContestant(spark, max(counts), workdir)  # Python workers and daemon started once
        topics = fresh_topics(broker.bootstrap_servers, "scaling-warm", args.partitions)
        fill(input_producer(broker.bootstrap_servers), topics.source, 0, 1000, args.keys)
        warm.start(broker.bootstrap_servers, topics, f"{workdir}/warm.first")
        wait_committed(broker.bootstrap_servers, warm, topics, end_offsets(broker.bootstrap_servers, topics))
        warm.stop()
        print(f"{'round':>5} {'threads':>7} {'ran':>4} {'rate/s':>9} {'ratio':>6} {'worker cpu s/M':>15} "
              f"{'all cpu s/M':>12} {'load':>5}", flush=True)
        for number in range(1, args.repeat + 1):
            base = None
            for threads in counts:
                figures = run_one(broker.bootstrap_servers, spark, threads, args, workdir)
                base = base or figures["rate"]
                figures["ratio"] = figures["rate"] / base
                results[threads].append(figures)
                print(f"{number:5} {threads:7} {figures['threads_run']:4} {figures['rate']:9,.0f} "
                      f"{figures['ratio']:5.2f}x {figures['worker_cpu']:15.1f} {figures['all_cpu']:12.1f} "
                      f"{os.getloadavg()[0]:5.2f}", flush=True)
    spark.stop()
    first = counts[0]
    print(f"\nmedians of {args.repeat} rounds (load average now {os.getloadavg()[0]:.2f}):")
    for threads in counts:
        rows = results[threads]
        rate = statistics.median(r["rate"] for r in rows)
        ratio = statistics.median(r["ratio"] for r in rows)
        worker = statistics.median(r["worker_cpu"] for r in rows)
        base_worker = statistics.median(r["worker_cpu"] for r in results[first])
        print(f"  {threads} thread(s): {rate:9,.0f} records/s  ratio {ratio:.2f}x  worker CPU "
              f"{worker:.1f} s per million ({worker / base_worker - 1:+.0%} vs {first})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
