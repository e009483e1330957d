"""strom beside its JVM peers (issue 29): Kafka Streams, Spark Structured Streaming, the plain loop.

    python bench/jvm_peers.py [--broker kafka|strom]
                              [--contestants kafka-streams,spark-ss,spark-rt,strom,plain] [--records 200000]
                              [--keys 10000] [--partitions 4] [--rate 2000] [--seconds 30]
                              [--half-rate] [--quick] [--baseline DIR]

Needs `make kafka bench-jvm` (Apache Kafka's jars, the Kafka Streams contestant compiled, Spark's Kafka
connector); `--quick` is 50,000 records and 10 s of latency, a few minutes in all.

The workload is bench/pipeline.py's (issue 14): JSON records ``{"key": "key-17", "seq": 123}`` keyed by
``key``, counted per key; the output gets the running count per key (8-byte big-endian Long). Every
contestant gets topics of its own filled with the same records (made once by ``record_value``), on one
broker: Apache Kafka 4.1.1 (tests/support/apache_kafka.py, one KRaft node, group.initial.rebalance.delay.ms=0
as `strom broker` has it) by default, or `strom broker` in its own process (``--broker strom``).

Contestants, one after another, each in a process of its own started by this bench (its whole process
tree is measured: the JVM and Spark's Python workers included):
  kafka-streams  bench/jvm/kafka-streams (Java): stream -> mapValues(Jackson parse) -> groupByKey ->
                 count (RocksDB store, record cache: Kafka Streams' defaults) -> toStream -> to;
                 exactly_once_v2, commit.interval.ms=100.
  spark-ss       PySpark Structured Streaming, micro-batch (default trigger) with Spark's own Kafka source
                 and sink (spark-sql-kafka-0-10, bench/jvm/spark-kafka),
                 groupBy(key).transformWithStateInPandas (the Python stateful API PySpark 4.x
                 documents; RocksDB state store provider), json.loads of each value in the Python
                 worker, output mode update, spark.sql.shuffle.partitions = partitions, local[2].
                 Spark's Kafka sink is at-least-once and writes no record timestamp: the input
                 timestamp travels in an ``input-ts`` header, which the latency reader uses.
  spark-rt       the same query with ``trigger(realTime=...)`` (Real-time Mode); Spark's refusal, if it
                 refuses, is the row's problem.
  strom          SparkStreams with execution.mode=realtime (bench/pipeline.py's topology), exactly_once_v2,
                 commit.interval.ms=100, its own Spark session (local[2]).
  plain          bench/pipeline.py's plain confluent-kafka transactional consume-count-produce loop.
  baseline       with ``--baseline DIR``: the strom contestant run from another source tree (``DIR/src``
                 first on its PYTHONPATH, so its driver and Spark's Python workers import that strom),
                 right before strom: a change measured against the code before it in one invocation
                 (``git worktree add DIR main``, or ``git archive main src | tar -x -C DIR``).

Figures per contestant:
  rate        phase A: records / (last commit - first record parsed). The first record parsed writes the
              wall-clock time to a file (in whichever process parses it). The last commit: the group's
              committed offsets reach the input's end (Kafka Streams, strom, plain), or Spark's checkpoint
              has a committed batch whose offsets reach it (Spark commits no offsets to Kafka).
  start-up    process start -> first record parsed (JVM, Spark session, group join, init_transactions).
  latency     phase B: --rate records/s for --seconds, stamped with their send time; now - input
              timestamp of every output record since the phase began, p50/p99/max ms, nothing discarded.
              ``--half-rate`` adds phase C at 50% of the contestant's own phase-A rate.
  CPU         CPU seconds (user+system) of the contestant's process tree per million records, from the
              first record parsed to the last commit of phase A (sampled every 0.2 s).
  peak RSS    the largest sum of RSS over the tree, sampled every 0.2 s, whole run.
  correct     the output read read_committed from its start must hold every key's expected count after
              each phase; a contestant that gets a count wrong is marked WRONG and its ratios are not used.

The machine is shared: compare ratios within one run only.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pipeline
from machine import describe
from pipeline import LONG, Topics
from strom.kafka import clients

log = logging.getLogger("jvm_peers")

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
CONTESTANTS = ("kafka-streams", "spark-ss", "spark-rt", "strom", "plain")
COMMIT_INTERVAL_MS = pipeline.COMMIT_INTERVAL_MS
SAMPLE_S = 0.2
REALTIME_BATCH = "5 seconds"
"""Spark Real-time Mode's batch duration (its checkpoint interval)."""
INPUT_TS_HEADER = "input-ts"


def pom_property(pom: Path, name: str) -> str:
    text = pom.read_text()
    return text.split(f"<{name}>", 1)[1].split(f"</{name}>", 1)[0]


KS_VERSION = pom_property(BENCH / "jvm/kafka-streams/pom.xml", "kafka.version")
SPARK_KAFKA_VERSION = pom_property(BENCH / "jvm/spark-kafka/pom.xml", "spark.version")
KS_DIR = ROOT / ".cache/bench-jvm" / f"kafka-streams-{KS_VERSION}"
SPARK_KAFKA_LIBS = ROOT / ".cache/bench-jvm" / f"spark-kafka-{SPARK_KAFKA_VERSION}" / "libs"


# --- measuring a process tree ---------------------------------------------------------------------

def proc_stats() -> dict[int, tuple[int, float, float, int]]:
    """Every process in /proc: pid -> (parent pid, start time in ticks, CPU seconds user+system, RSS
    bytes). Read from /proc (Linux) rather than through psutil, which strom does not depend on."""
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after "pid (comm)": state ppid ... utime(12) stime(13) ... starttime(20) vsize(21) rss(22)
        stats[int(entry)] = (int(fields[1]), float(fields[19]),
                             (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, int(fields[21]) * PAGE_SIZE)
    return stats


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class TreeSampler:
    """CPU seconds and RSS of a process and all its descendants, sampled by a thread: a descendant that
    has exited keeps the CPU it was last seen with."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu: dict[tuple[int, float], float] = {}
        self.history: list[tuple[float, float]] = []
        self.peak_rss = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tree-sampler")
        self._thread.start()

    def sample(self) -> float:
        stats = proc_stats()
        children: dict[int, list[int]] = {}
        for pid, (parent, *_rest) in stats.items():
            children.setdefault(parent, []).append(pid)
        tree, rss = [self.pid] if self.pid in stats else [], 0
        for pid in tree:  # grows while walked: breadth first
            tree.extend(children.get(pid, ()))
        with self._lock:
            for pid in tree:
                _parent, started, cpu, resident = stats[pid]
                self.cpu[(pid, started)] = cpu
                rss += resident
            self.peak_rss = max(self.peak_rss, rss)
            total = sum(self.cpu.values())
            self.history.append((time.time(), total))
        return total

    def cpu_at(self, when: float) -> float:
        """The last sample taken at or before ``when``."""
        before = [cpu for stamp, cpu in self.history if stamp <= when]
        return before[-1] if before else 0.0

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


# --- the contestants (each a process started by the bench) ----------------------------------------

class Contestant:
    """A contestant's process: started, checked, stopped with SIGTERM (its tree killed if it lingers)."""

    name = ""
    label = ""

    def __init__(self, workdir: str, args: argparse.Namespace) -> None:
        self.workdir, self.args = workdir, args
        self.group = f"jvm-peers-{self.name}-{os.urandom(4).hex()}"
        self.process: subprocess.Popen | None = None
        self.sampler: TreeSampler | None = None
        self.started = 0.0
        self.stderr_path = os.path.join(workdir, f"{self.group}.stderr")

    def command(self, bootstrap: str, topics: Topics, mark: str) -> list[str]:
        raise NotImplementedError

    source: str | None = None
    """Another strom source tree to import (``--baseline``); None: the installed strom."""

    def start(self, bootstrap: str, topics: Topics, mark: str) -> None:
        first = [os.path.join(self.source, "src")] if self.source else []
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([*first, str(BENCH), os.environ.get("PYTHONPATH", "")])}
        self.started = time.time()
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(self.command(bootstrap, topics, mark), stdout=stderr,
                                            stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
                                            start_new_session=True)
        self.sampler = TreeSampler(self.process.pid)

    def check(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.label} exited with code {self.process.returncode}: {self.failure()}")

    def failure(self) -> str:
        """The telling line of the process's output: Spark's first error condition (``[NAME] ...``),
        else the last exception or error it printed."""
        lines = [line.strip() for line in Path(self.stderr_path).read_text(errors="replace").splitlines()
                 if line.strip()]
        conditions = [line for line in lines if re.search(r"\[[A-Z][A-Z_]+[A-Z]\]", line)]
        if conditions:
            return conditions[0][:1000]
        telling = [line for line in lines if ("Exception" in line or "Error" in line or "error" in line)
                   and not line.startswith("at ")]
        return (telling or lines or ["no output"])[-1][:600]

    def wait_processed(self, bootstrap: str, topics: Topics, ends: dict[int, int]) -> float:
        return pipeline.wait_committed(bootstrap, self, topics, ends)

    def stop(self) -> None:
        """SIGTERM to the contestant's own process (which stops its JVM or Spark), then its group killed."""
        if self.process is None:
            return
        if self.sampler is not None:
            self.sampler.stop()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in 60 s: killed", self.label)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


class KafkaStreamsContestant(Contestant):
    name, label = "kafka-streams", f"Kafka Streams {KS_VERSION} (Java)"

    def command(self, bootstrap: str, topics: Topics, mark: str) -> list[str]:
        if not (KS_DIR / "classes/.complete").exists():
            raise RuntimeError(f"the Kafka Streams contestant is not built in {KS_DIR}: run `make bench-jvm`")
        class_path = os.pathsep.join([str(KS_DIR / "classes"), str(KS_DIR / "libs/*")])
        return ["java", "-cp", class_path, "dev.strom.bench.CountByKey", bootstrap, self.group,
                topics.source, topics.sink, os.path.join(self.workdir, self.group), mark]


class PythonChild(Contestant):
    child = ""
    """The ``child`` command it runs (its name unless set)."""

    def command(self, bootstrap: str, topics: Topics, mark: str) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "child", self.child or self.name,
                "--bootstrap", bootstrap,
                "--group", self.group, "--source", topics.source, "--sink", topics.sink,
                "--partitions", str(topics.partitions), "--mark", mark, "--workdir", self.workdir]


class StromContestant(PythonChild):
    name, label = "strom", "strom real-time (SparkStreams)"


class BaselineContestant(StromContestant):
    """strom from ``--baseline DIR``; its child is strom's (``child strom``)."""

    name, label = "baseline", "strom real-time, --baseline tree"
    child = "strom"

    def __init__(self, workdir: str, args: argparse.Namespace) -> None:
        super().__init__(workdir, args)
        self.source = args.baseline


class PlainContestant(PythonChild):
    name, label = "plain", "plain confluent-kafka loop"


class SparkContestant(PythonChild):
    name = "spark-ss"
    label = "Spark SS micro-batch, transformWithStateInPandas"

    def wait_processed(self, bootstrap: str, topics: Topics, ends: dict[int, int]) -> float:
        """``time.time()`` when the query's checkpoint has a committed batch reaching ``ends``."""
        checkpoint = Path(self.workdir) / self.group / "checkpoint"
        deadline = time.monotonic() + pipeline.CATCH_UP_TIMEOUT_S
        while time.monotonic() < deadline:
            offsets = committed_spark_offsets(checkpoint, topics.source)
            if offsets and all(offsets.get(p, -1) >= end for p, end in ends.items()):
                return time.time()
            self.check()
            time.sleep(0.02)
        raise RuntimeError(f"{self.label} did not commit its input in {pipeline.CATCH_UP_TIMEOUT_S:.0f} s")


class SparkRealTimeContestant(SparkContestant):
    name = "spark-rt"
    label = f"Spark SS Real-time Mode ({REALTIME_BATCH}), JVM groupBy().count()"


def committed_spark_offsets(checkpoint: Path, topic: str) -> dict[int, int]:
    """The source offsets of the last batch in ``commits/`` (Spark's offset log: a version line, the
    batch metadata, then one JSON line per source)."""
    batches = [int(name) for name in os.listdir(checkpoint / "commits")
               if name.isdigit()] if (checkpoint / "commits").is_dir() else []
    if not batches:
        return {}
    try:
        lines = (checkpoint / "offsets" / str(max(batches))).read_text().splitlines()
    except FileNotFoundError:
        return {}
    for line in lines:
        if line.startswith("{") and f'"{topic}"' in line:
            return {int(p): offset for p, offset in json.loads(line)[topic].items()}
    return {}


CLASSES: dict[str, type[Contestant]] = {
    "kafka-streams": KafkaStreamsContestant, "spark-ss": SparkContestant,
    "spark-rt": SparkRealTimeContestant, "strom": StromContestant, "plain": PlainContestant,
    "baseline": BaselineContestant}


# --- where strom's stream threads spend their time (--profile) -----------------------------------

PROFILE_RATE = 100
"""py-spy samples a second."""
CATEGORIES = (
    ("commit", ("commit_transaction", "send_offsets_to_transaction", "_commit_all", "_commit (",
                "ProducerSink.flush")),
    ("produce", ("produce", "producer_sink")),
    ("cache/store", ("state/", "rocksdb")),
    ("deserialize", ("serdes", "deserialize", "StreamTask._process_run")),
    ("process", ("json", "processor/", "kstream/", "pipeline.py")),
    ("consume", ("consume (", "poll (", "_route", "reading.py", "StreamThread._loop")),
)
"""A sample's category: the first of its frames, from the innermost out, that names one of these.
The stream thread's loop calls the consumer (C code, no frame of its own) and its task's record loop
deserializes inline: samples whose innermost frame is one of those count as consume and deserialize."""


class StreamThreadProfile:
    """py-spy over a contestant's process tree (``--subprocesses``): the samples of strom's stream
    threads (stacks through ``spark/runtime/thread.py``), split into the per-record steps."""

    def __init__(self, pid: int, workdir: str) -> None:
        py_spy = Path(sys.executable).with_name("py-spy")
        self.output = os.path.join(workdir, f"py-spy-{pid}.txt")
        self.process = subprocess.Popen(
            [str(py_spy), "record", "--pid", str(pid), "--subprocesses", "--rate", str(PROFILE_RATE),
             "--format", "raw", "--nonblocking", "--output", self.output],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def split(self) -> dict[str, float]:
        """Stops sampling; seconds of stream-thread samples per category."""
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)
        return stream_thread_split(self.output)


def stream_thread_split(path: str) -> dict[str, float]:
    """Seconds of stream-thread samples per category in a py-spy raw file."""
    seconds: Counter[str] = Counter()
    with contextlib.suppress(FileNotFoundError), open(path) as file:
        for line in file:
            stack, _, count = line.rstrip().rpartition(" ")
            if "spark/runtime/thread.py" in stack:
                seconds[category(stack)] += int(count) / PROFILE_RATE
    return dict(seconds)


def category(stack: str) -> str:
    frames = [frame for frame in stack.split(";")[::-1] if not frame.startswith("process ")]
    if any("_open_all" in frame for frame in frames):
        return "opening tasks"
    named = (name for frame in frames for name, marks in CATEGORIES if any(mark in frame for mark in marks))
    return next(named, "other (thread loop)")


def print_profile(split: dict[str, float], records: int) -> None:
    total = sum(split.values())
    if not total:
        print("  strom profile: no stream-thread samples (is py-spy installed in the venv?)")
        return
    print(f"  strom stream threads, phase A, py-spy at {PROFILE_RATE}/s: {total:.1f} s of samples, "
          f"{total / records * 1e6:.1f} us a record")
    for name, seconds in sorted(split.items(), key=lambda item: -item[1]):
        print(f"    {name:<22}{seconds:>7.2f} s {seconds / total:>6.1%} "
              f"{seconds / records * 1e6:>8.1f} us/record")


# --- the children ---------------------------------------------------------------------------------

def stop_on_sigterm() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def child_plain(options: argparse.Namespace, topics: Topics) -> int:
    pipeline.plain_loop(options.bootstrap, options.group, topics, options.mark, stop_on_sigterm())
    return 0


def child_strom(options: argparse.Namespace, topics: Topics) -> int:
    stop = stop_on_sigterm()
    import strom.spark
    from strom.spark.runtime import SparkStreams

    spark = strom.spark.session(app_name="jvm-peers-strom", log_level="ERROR")
    app = SparkStreams(pipeline.count_topology(topics, pipeline.ParseJson(options.mark)), {
        "application.id": options.group, "bootstrap.servers": options.bootstrap,
        "processing.guarantee": "exactly_once_v2", "commit.interval.ms": COMMIT_INTERVAL_MS,
        "state.dir": os.path.join(options.workdir, options.group), "execution.mode": "realtime"}, spark)
    app.start()
    while not stop.wait(0.2):
        if app.state is app.State.ERROR:
            app.await_termination(0)  # raises with Spark's message
            return 1
    app.stop()
    spark.stop()
    return 0


def mark_once(path: str) -> None:
    pipeline.write_once(path, repr(time.time()))


def child_spark(options: argparse.Namespace, topics: Topics, real_time: bool) -> int:
    stop = stop_on_sigterm()
    import pandas as pd
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    jars = sorted(glob.glob(str(SPARK_KAFKA_LIBS / "*.jar")))
    if not jars:
        print(f"Spark's Kafka connector is not in {SPARK_KAFKA_LIBS}: run `make bench-jvm`", file=sys.stderr)
        return 2
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Real-time Mode runs a query's stages at once (a pipelined shuffle): a task slot per source
    # partition and per shuffle partition, else it refuses to start (CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT)
    slots = 2 * topics.partitions if real_time else 2
    spark = (SparkSession.builder.master(f"local[{slots}]").appName(f"jvm-peers-{options.name}")
             .config("spark.jars", ",".join(jars))
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(topics.partitions))
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    mark = options.mark

    class CountProcessor(StatefulProcessor):
        """Counts each key's records (json.loads of every value, as the others); emits the new count
        with the latest input timestamp of the key in the batch."""

        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", StructType([StructField("count", LongType())]))
            self.marked = False

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            if not self.marked:
                self.marked = True
                mark_once(mark)
            count = self.count.get()[0] if self.count.exists() else 0
            latest = 0
            for frame in rows:
                for value in frame["value"]:
                    json.loads(value)
                count += len(frame)
                latest = max(latest, int(frame["ts"].max()))
            self.count.update((count,))
            # int.to_bytes, not the LONG Struct: Spark pickles this class, and a Struct does not pickle
            yield pd.DataFrame({"key": [bytes(key[0])], "value": [count.to_bytes(8, "big", signed=True)],
                                "ts": [latest.to_bytes(8, "big", signed=True)]})

        def close(self) -> None:
            pass

    output = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                         StructField("ts", BinaryType())])
    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", options.bootstrap)
              .option("subscribe", topics.source)
              .option("startingOffsets", "earliest")
              .load()
              .select("key", "value", F.unix_millis("timestamp").alias("ts")))
    if real_time:
        counted = _jvm_count(source)
        _mark_on_first_output(options.bootstrap, topics.sink, mark)
    else:
        counted = (source.groupBy("key")
                   .transformWithStateInPandas(statefulProcessor=CountProcessor(), outputStructType=output,
                                               outputMode="Update", timeMode="None"))
    counted = counted.select("key", "value", F.array(F.struct(F.lit(INPUT_TS_HEADER).alias("key"),
                                                              F.col("ts").alias("value"))).alias("headers"))
    writer = (counted.writeStream.format("kafka")
              .option("kafka.bootstrap.servers", options.bootstrap)
              .option("topic", topics.sink)
              .option("includeHeaders", "true")
              .option("checkpointLocation", os.path.join(options.workdir, options.group, "checkpoint"))
              .outputMode("update"))
    if real_time:
        writer = writer.trigger(realTime=REALTIME_BATCH)
    query = writer.start()
    while not stop.wait(0.2):
        if not query.isActive:
            error = query.exception()
            print(f"query stopped: {error}", file=sys.stderr)
            return 1
    query.stop()
    spark.stop()
    return 0


def _jvm_count(source: Any) -> Any:
    """The count as Real-time Mode takes it. Spark 4.3's Real-time Mode runs ``groupBy().agg()`` and the
    JVM ``transformWithState``, not ``transformWithStateInPandas`` (its guide's supported queries), and
    refuses a Python UDF (``ArrowEvalPythonExec`` is not in its operator allowlist), so this query has
    no Python: the JSON is parsed by Spark (``get_json_object``), the count is Spark's aggregation."""
    from pyspark.sql import functions as F

    parsed = F.get_json_object(F.col("value").cast("string"), "$.key").alias("parsed")
    return (source.select("key", parsed, "ts")
            .groupBy("key").agg(F.count("parsed").alias("count"), F.max("ts").alias("ts"))
            .select("key", _long_bytes(F.col("count")).alias("value"), _long_bytes(F.col("ts")).alias("ts")))


def _mark_on_first_output(bootstrap: str, sink: str, mark: str) -> None:
    """For a query with no Python to mark its first record parsed: the first output record's arrival
    (Spark's Kafka sink writes at once, no transaction), a little after the first record was parsed,
    so the rate measured from it is, if anything, Spark's in its favour."""
    def watch() -> None:
        consumer = clients.consumer(bootstrap, group_id=f"mark-{uuid.uuid4().hex[:8]}",
                                    **{"isolation.level": "read_uncommitted"})
        consumer.subscribe([sink])
        while consumer.poll(0.05) is None:
            pass
        mark_once(mark)
        consumer.close()

    threading.Thread(target=watch, daemon=True).start()


def _long_bytes(column: Any) -> Any:
    """A non-negative bigint as Kafka's LongSerializer writes it (8 bytes, big-endian): ANSI Spark
    refuses ``cast(bigint as binary)``."""
    from pyspark.sql import functions as F

    return F.unhex(F.lpad(F.hex(column), 16, "0"))


def child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="jvm_peers.py child")
    parser.add_argument("name", choices=("strom", "plain", "spark-ss", "spark-rt"))
    for option in ("--bootstrap", "--group", "--source", "--sink", "--mark", "--workdir"):
        parser.add_argument(option, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    topics = Topics(options.source, options.sink, options.partitions)
    if options.name == "plain":
        return child_plain(options, topics)
    if options.name == "strom":
        return child_strom(options, topics)
    return child_spark(options, topics, real_time=options.name == "spark-rt")


# --- the output -----------------------------------------------------------------------------------

class InputStampedReader(pipeline.OutputReader):
    """Latency from the ``input-ts`` header when there is one: Spark's sink stamps its own timestamp."""

    def stamp(self, record: Any) -> int:
        for key, value in record.headers() or ():
            if key == INPUT_TS_HEADER:
                return LONG.unpack(value)[0]
        return record.timestamp()[1]


# --- one contestant's run -------------------------------------------------------------------------

@dataclass
class Latency:
    rate: int
    sent_per_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    timed: int = 0


@dataclass
class Figures:
    name: str
    label: str
    records_per_s: float = 0.0
    startup_s: float = 0.0
    cpu_s_per_million: float = 0.0
    peak_rss_mb: float = 0.0
    latencies: list[Latency] = field(default_factory=list)
    profile: dict[str, float] = field(default_factory=dict)
    problem: str = ""


def run_contestant(bootstrap: str, contestant: Contestant, args: argparse.Namespace) -> Figures:
    figures = Figures(contestant.name, contestant.label)
    topics = pipeline.fresh_topics(bootstrap, contestant.name, args.partitions)
    producer = pipeline.input_producer(bootstrap)
    mark = os.path.join(contestant.workdir, f"{contestant.group}-first-record")
    pipeline.fill(producer, topics.source, 0, args.records, args.keys)
    ends = pipeline.end_offsets(bootstrap, topics)
    reader = None
    try:
        contestant.start(bootstrap, topics, mark)
        assert contestant.process is not None
        profile = (StreamThreadProfile(contestant.process.pid, contestant.workdir)
                   if args.profile and contestant.name == "strom" else None)
        last_commit = contestant.wait_processed(bootstrap, topics, ends)
        if profile is not None:
            figures.profile = profile.split()
        assert contestant.sampler is not None
        cpu_end = contestant.sampler.sample()
        first_record = float(Path(mark).read_text())
        figures.records_per_s = args.records / (last_commit - first_record)
        figures.startup_s = first_record - contestant.started
        figures.cpu_s_per_million = ((cpu_end - contestant.sampler.cpu_at(first_record))
                                     / args.records * 1e6)
        print(f"  {contestant.name}: phase A {figures.records_per_s:,.0f} records/s, "
              f"start-up {figures.startup_s:.1f} s", flush=True)
        reader = InputStampedReader(bootstrap, topics)
        expected = pipeline.expected_counts(0, args.records, args.keys)
        if not reader.read_until(expected, pipeline.READ_TIMEOUT_S):
            figures.problem = pipeline.wrong_counts("A", reader, expected)
            return figures
        sent = args.records
        rates = [args.rate] + ([max(100, int(figures.records_per_s / 2))] if args.half_rate else [])
        for rate in rates:
            latency = measure_latency(bootstrap, contestant, topics, producer, reader, sent, rate, args)
            figures.latencies.append(latency)
            sent += rate * args.seconds
            if not reader.read_until(pipeline.expected_counts(0, sent, args.keys), 0):
                figures.problem = pipeline.wrong_counts(f"B at {rate:,}/s", reader,
                                               pipeline.expected_counts(0, sent, args.keys))
                return figures
            print(f"  {contestant.name}: {rate:,}/s p50 {latency.p50_ms:.0f} ms p99 {latency.p99_ms:.0f} ms",
                  flush=True)
    except Exception as exc:
        log.exception("%s failed", contestant.label)
        figures.problem = f"FAILED: {exc}"
    finally:
        contestant.stop()
        if contestant.sampler is not None:
            figures.peak_rss_mb = contestant.sampler.peak_rss / 2**20
        if reader is not None:
            reader.consumer.close()
    return figures


def measure_latency(bootstrap: str, contestant: Contestant, topics: Topics, producer: Any,
                    reader: InputStampedReader, first: int, rate: int, args: argparse.Namespace) -> Latency:
    """``rate`` records/s for ``--seconds`` from record ``first`` on, the reader timing every output
    record stamped since the phase began."""
    latency = Latency(rate)
    expected = pipeline.expected_counts(0, first + rate * args.seconds, args.keys)
    reader.latencies_ms = []
    reader.timed_since_ms = int(time.time() * 1000)
    following = threading.Thread(target=reader.read_until, daemon=True,
                                 args=(expected, args.seconds + pipeline.READ_TIMEOUT_S))
    following.start()
    latency.sent_per_s = pipeline.send_steady(producer, topics.source, first, rate, args.seconds, args.keys)
    contestant.wait_processed(bootstrap, topics, pipeline.end_offsets(bootstrap, topics))
    following.join(pipeline.READ_TIMEOUT_S)
    ordered = sorted(reader.latencies_ms)
    latency.timed = len(ordered)
    if ordered:
        latency.p50_ms, latency.p99_ms, latency.max_ms = (pipeline.percentile(ordered, q)
                                                          for q in (0.5, 0.99, 1.0))
    return latency


# --- the brokers ----------------------------------------------------------------------------------

@contextlib.contextmanager
def apache_kafka(workdir: str) -> Any:
    sys.path.insert(0, str(ROOT / "tests"))  # as the tests import it (support.*)
    from support.apache_kafka import KAFKA_VERSION, KafkaCluster

    if KAFKA_VERSION != KS_VERSION:
        raise SystemExit(f"bench/jvm/kafka-streams/pom.xml pins Kafka {KS_VERSION}, the Apache Kafka tests "
                         f"{KAFKA_VERSION}: make them equal")
    with KafkaCluster(Path(workdir) / "kafka", brokers=1,
                      config={"group.initial.rebalance.delay.ms": 0}) as cluster:
        yield f"Apache Kafka {KAFKA_VERSION} (1 KRaft node)", cluster.bootstrap_servers


@contextlib.contextmanager
def strom_broker(workdir: str) -> Any:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    strom = Path(sys.executable).with_name("strom")
    with open(os.path.join(workdir, "broker.log"), "w") as output:
        broker = subprocess.Popen([str(strom), "broker", "--data-dir", os.path.join(workdir, "broker"),
                                   "--port", str(port)], stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if broker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"strom broker did not start; see {workdir}/broker.log")
            time.sleep(0.2)
        yield "strom broker (its own process)", f"127.0.0.1:{port}"
    finally:
        broker.terminate()
        broker.wait(30)


# --- the table ------------------------------------------------------------------------------------

def print_table(rows: list[Figures], args: argparse.Namespace) -> None:
    print(f"\n{'contestant':<50}{'records/s':>10}{'start-up s':>11}"
          f"{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'CPU s/M':>9}{'peak RSS MB':>12}  correct")
    for f in rows:
        at_rate = next((lat for lat in f.latencies if lat.rate == args.rate and lat.timed), None)
        latency = [f"{ms:.0f}" if at_rate else "-"
                   for ms in ((at_rate.p50_ms, at_rate.p99_ms, at_rate.max_ms) if at_rate else (0, 0, 0))]
        rate = f"{f.records_per_s:,.0f}" if f.records_per_s else "-"
        startup = f"{f.startup_s:.1f}" if f.records_per_s else "-"
        cpu = f"{f.cpu_s_per_million:.0f}" if f.records_per_s else "-"
        correct = "no" if f.problem.startswith("WRONG") else ("-" if f.problem else "yes")
        print(f"{f.label:<50}{rate:>10}{startup:>11}" + "".join(f"{v:>8}" for v in latency)
              + f"{cpu:>9}{f.peak_rss_mb:>12.0f}  {correct}")
    for f in rows:
        for lat in f.latencies:
            print(f"  {f.name}: at {lat.rate:,}/s (sent {lat.sent_per_s:,.0f}/s) p50 {lat.p50_ms:.0f} ms, "
                  f"p99 {lat.p99_ms:.0f} ms, max {lat.max_ms:.0f} ms over {lat.timed:,} output records")
        if f.problem:
            print(f"  {f.name}: {f.problem}")
        if f.profile:
            print_profile(f.profile, args.records)


def ratios(rows: list[Figures], args: argparse.Namespace) -> str:
    """A contestant's rate counts unless its counts were wrong (one that failed in phase B still has
    its phase-A rate); its p99 only when it was measured."""
    by_name = {f.name: f for f in rows if f.records_per_s and not f.problem.startswith("WRONG")}

    def ratio(peer: str) -> str:
        strom, other = by_name.get("strom"), by_name.get(peer)
        if strom is None or other is None:
            return "rate -x p99 -x"
        p99 = {name: next((lat.p99_ms for lat in f.latencies if lat.rate == args.rate and lat.timed), 0.0)
               for name, f in (("strom", strom), (peer, other))}
        p99_ratio = f"{p99['strom'] / p99[peer]:.2f}x" if p99[peer] and p99["strom"] else "-x"
        return f"rate {strom.records_per_s / other.records_per_s:.2f}x p99 {p99_ratio}"

    return (f"strom/plain: {ratio('plain')}; strom/spark-rt: {ratio('spark-rt')}\n"
            f"strom/kafka-streams: {ratio('kafka-streams')}; strom/spark-ss: {ratio('spark-ss')}\n"
            f"strom/baseline: {ratio('baseline')}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", choices=("kafka", "strom"), default="kafka")
    parser.add_argument("--contestants", default=",".join(CONTESTANTS),
                        help="comma-separated, run in this order: " + ",".join(CONTESTANTS))
    parser.add_argument("--records", type=int, help="phase A: records in the input (200,000; --quick 50,000)")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=2_000, help="phase B: records/s sent")
    parser.add_argument("--seconds", type=int, help="phase B (and C): how long (30 s; --quick 10 s)")
    parser.add_argument("--half-rate", action="store_true",
                        help="phase C: latency at 50%% of each contestant's own phase-A rate")
    parser.add_argument("--timeout", type=float, default=pipeline.CATCH_UP_TIMEOUT_S,
                        help="seconds a contestant has to commit its input (600)")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy (pip install py-spy) over strom's process tree in phase A: where its "
                             "stream threads spend their time")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run the strom contestant from the source tree DIR (its src/), right "
                             "before strom: before and after a change in one invocation")
    parser.add_argument("--quick", action="store_true",
                        help="50,000 records and 10 s of latency unless --records or --seconds say otherwise")
    args = parser.parse_args(argv)
    args.records = args.records or (50_000 if args.quick else 200_000)
    args.seconds = args.seconds or (10 if args.quick else 30)
    args.names = [n.strip() for n in args.contestants.split(",") if n.strip()]
    unknown = set(args.names) - set(CONTESTANTS)
    if unknown:
        parser.error(f"unknown contestant {', '.join(sorted(unknown))}; choose from {', '.join(CONTESTANTS)}")
    if args.baseline:
        if not (Path(args.baseline) / "src" / "strom").is_dir():
            parser.error(f"--baseline {args.baseline}: no strom source tree there (src/strom)")
        args.names.insert(args.names.index("strom") if "strom" in args.names else len(args.names), "baseline")
    return args


def build_jvm_contestants() -> None:
    """``make bench-jvm``: the Kafka Streams program compiled and Spark's Kafka connector fetched from
    Maven Central, once (make skips what is up to date), so the bench runs from a fresh clone."""
    result = subprocess.run(["make", "--no-print-directory", "bench-jvm"], cwd=ROOT, capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise SystemExit(f"`make bench-jvm` failed:\n{result.stdout}{result.stderr}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["child"]:
        return child_main(argv[1:])
    args = parse_args(argv)
    pipeline.CATCH_UP_TIMEOUT_S = args.timeout
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import pyspark

    if {"kafka-streams", "spark-ss", "spark-rt"} & set(args.names):
        build_jvm_contestants()
    print(describe())
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"count-by-key of JSON records: {args.records:,} records, {args.keys:,} keys, {args.partitions} "
          f"partitions, exactly_once_v2, commit.interval.ms={COMMIT_INTERVAL_MS}; latency at "
          f"{args.rate:,} records/s for {args.seconds} s, nothing discarded; Kafka Streams {KS_VERSION}, "
          f"PySpark {pyspark.__version__} with spark-sql-kafka-0-10 {SPARK_KAFKA_VERSION}", flush=True)
    rows: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="strom-jvm-peers-") as workdir:
        broker = strom_broker if args.broker == "strom" else apache_kafka
        with broker(workdir) as (described, bootstrap):
            print(f"broker: {described} at {bootstrap}", flush=True)
            for name in args.names:
                print(f"{name}...", flush=True)
                rows.append(run_contestant(bootstrap, CLASSES[name](workdir, args), args))
    print_table(rows, args)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(ratios(rows, args))
    return 1 if any(f.problem.startswith("WRONG") for f in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
