"""A count-by-key pipeline three ways: a plain confluent-kafka loop, strom real-time, strom micro-batch.

    python bench/pipeline.py [--mode realtime,microbatch,plain] [--records 200000] [--keys 10000]
                             [--partitions 4] [--rate 2000] [--seconds 30] [--repeat 1]

The workload (issue 14): JSON records ``{"key": "key-17", "seq": 123}`` keyed by their ``key``, counted
per key under exactly_once_v2 with commit.interval.ms=100; the output topic gets the running count
per key (Long), stamped with the input record's timestamp. Everything runs on one embedded broker.

Contestants, one after another in this process, each with fresh input and output topics holding the
same records:
  plain       the reference, written out below (``plain_loop``): one Python process, a read_committed
              consumer in a group, counts in a dict, every update produced, and every 100 ms
              ``send_offsets_to_transaction`` + ``commit_transaction``. It keeps no changelog.
  realtime    ``SparkStreams(..., {"execution.mode": "realtime"})``: stream -> map_values(json) ->
  microbatch  group_by_key -> count (RocksDB, record cache on: Kafka Streams' defaults) -> to_stream
              -> to(output, Long), on one Spark session (local[2]) shared by both modes.
A strom that does not know ``execution.mode`` says so: real-time is reported unavailable, and
micro-batch runs without the key (it was the only mode then).

Phase A, processing rate: ``--records`` records are in the input before the contestant starts.
  rate      records / (last commit - first record processed). The first record processed is when
            the JSON parse sees its first record, in whichever process (Spark Python worker or the
            plain loop): it writes the wall-clock time to a file once. The last commit is when the
            contestant's group has committed every input offset, polled every 20 ms (what
            ``wait_until_caught_up`` reads, polled finer).
  wall      from constructing the contestant (``SparkStreams`` or the plain loop's process) to that
            last commit: start-up included. The Spark session is made once before and its time
            printed; before each strom mode a warm-up application counts 1,000 records (its wall
            time, printed, is the cold start: Spark's Python workers and daemon starting).
  Correctness: the output read read_committed from its start must hold each key's final count;
  the bench exits 1 if any contestant gets a count wrong.
Phase B, latency: the contestant running and caught up, ``--rate`` records/s are sent for
``--seconds`` (what is due sent every 5 ms), each stamped with its send time (producer linger.ms=5,
strom's default). A read_committed consumer takes now - timestamp of every output record stamped
since the phase began: p50, p99 and max in ms, nothing discarded (the first seconds included). The
counts are checked again at the end (phase A's plus phase B's records).

Ratios are within one round: rate / plain loop's rate, p99 / plain loop's p99. The machine is shared
and its speed drifts by up to 2x for seconds at a time: ``--repeat N`` runs N interleaved rounds and
adds each figure's median; compare runs only on one host (the first line says which).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import multiprocessing
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)

from machine import describe
from strom.broker import EmbeddedBroker
from strom.errors import ConfigError
from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder, StreamsConfig, Topology

if TYPE_CHECKING:
    from strom.spark.runtime import SparkStreams

log = logging.getLogger("pipeline")

MODES = ("realtime", "microbatch", "plain")
COMMIT_INTERVAL_MS = 100
WARM_UP_RECORDS = 1_000
LONG = struct.Struct(">q")
"""Kafka's LongSerializer: 8 bytes, big-endian."""
CATCH_UP_TIMEOUT_S = 600.0
READ_TIMEOUT_S = 120.0
SEND_TICK_S = 0.005
"""Phase B's producer sends what is due every 5 ms (the bench's own threads share the GIL with the
Spark driver)."""


# --- the records --------------------------------------------------------------------------------

def record_key(i: int, keys: int) -> bytes:
    return f"key-{i % keys}".encode()


def record_value(i: int, keys: int) -> bytes:
    return json.dumps({"key": f"key-{i % keys}", "seq": i}).encode()


def expected_counts(first: int, count: int, keys: int) -> Counter[bytes]:
    return Counter(record_key(i, keys) for i in range(first, first + count))


class ParseJson:
    """The per-record work of every contestant (json.loads); the first record it sees in any process
    writes the wall-clock time to ``mark`` (the first writer wins): where the processing rate starts."""

    def __init__(self, mark: str) -> None:
        self.mark = mark
        self.marked = False

    def __call__(self, value: str | bytes) -> Any:
        if not self.marked:
            self.marked = True
            write_once(self.mark, repr(time.time()))
        return json.loads(value)


def write_once(path: str, text: str) -> None:
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


# --- topics ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Topics:
    source: str
    sink: str
    partitions: int


def fresh_topics(bootstrap: str, name: str, partitions: int) -> Topics:
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(f"pipeline-{name}-in-{suffix}", f"pipeline-{name}-out-{suffix}", partitions)
    clients.create_topics(bootstrap, {topics.source: partitions, topics.sink: partitions})
    return topics


def input_producer(bootstrap: str) -> Producer:
    """One per contestant, for the fill and for phase B: a new idempotent producer's first records
    sometimes waited ~0.5 s to be delivered (its start-up), which phase B charged to the contestant."""
    return clients.producer(bootstrap, **JAVA_PARTITIONER)


def fill(producer: Producer, topic: str, first: int, count: int, keys: int) -> None:
    for i in range(first, first + count):
        clients.produce(producer, topic, record_value(i, keys), record_key(i, keys))
    assert producer.flush(60) == 0, "the input was not all written in 60 s"


def end_offsets(bootstrap: str, topics: Topics) -> dict[int, int]:
    consumer = clients.consumer(bootstrap)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topics.source, p), timeout=10)[1]
                for p in range(topics.partitions)}
    finally:
        consumer.close()


def available(consumer: Consumer, wait: float) -> list:
    """The records already fetched, else the next one within ``wait`` seconds: ``consume(n, timeout)``
    alone would hold records back until it has n of them or the timeout passes."""
    records = consumer.consume(1000, timeout=0)
    if not records:
        record = consumer.poll(wait)
        records = [record] if record is not None else []
    for record in records:
        if record.error():
            raise KafkaException(record.error())
    return records


# --- the plain loop (the reference) ---------------------------------------------------------------

def plain_loop(bootstrap: str, group: str, topics: Topics, mark: str, stop: Any) -> None:
    """Read, count, write, and every commit interval commit outputs and input offsets in one
    transaction; output timestamp = input timestamp. Runs in its own process until ``stop`` is set."""
    consumer = clients.consumer(bootstrap, group)  # read_committed, no auto-commit, from the earliest
    producer = clients.producer(bootstrap, **JAVA_PARTITIONER, **{"transactional.id": f"{group}-0"})
    producer.init_transactions()
    producer.begin_transaction()
    consumer.subscribe([topics.source])
    parse, counts = ParseJson(mark), {}
    uncommitted, next_commit = False, time.monotonic() + COMMIT_INTERVAL_MS / 1000
    while not stop.is_set():
        for record in available(consumer, max(0.0, next_commit - time.monotonic())):
            parse(record.value())
            key = record.key()
            counts[key] = counts.get(key, 0) + 1
            clients.produce(producer, topics.sink, LONG.pack(counts[key]), key,
                            timestamp=record.timestamp()[1])
            uncommitted = True
        if time.monotonic() >= next_commit:
            if uncommitted:
                commit(producer, consumer)
                uncommitted = False
            next_commit = time.monotonic() + COMMIT_INTERVAL_MS / 1000
    if uncommitted:
        commit(producer, consumer)
    consumer.close()


def commit(producer: Producer, consumer: Consumer) -> None:
    """The positions of partitions read so far (one not read yet has none) go into the transaction."""
    positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
    producer.commit_transaction()
    producer.begin_transaction()


class Contestant(Protocol):
    name: str
    label: str
    group: str
    """The consumer group whose committed offsets say what the contestant has processed."""

    def start(self, bootstrap: str, topics: Topics, mark: str) -> None: ...

    def check(self) -> None:
        """Raises if the contestant has failed."""

    def stop(self) -> None:
        """Stops it if it was started."""


class PlainContestant:
    name, label = "plain", "plain loop"

    def __init__(self) -> None:
        self.group = f"pipeline-plain-{uuid.uuid4().hex[:8]}"
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._context = context
        self._process: Any = None

    def start(self, bootstrap: str, topics: Topics, mark: str) -> None:
        self._process = self._context.Process(target=plain_loop, name="plain-loop",
                                              args=(bootstrap, self.group, topics, mark, self._stop))
        self._process.start()

    def check(self) -> None:
        if self._process.exitcode is not None:
            raise RuntimeError(f"the plain loop exited with code {self._process.exitcode}")

    def stop(self) -> None:
        self._stop.set()
        if self._process is not None:
            self._process.join(30)
            if self._process.is_alive():
                self._process.kill()


# --- strom ----------------------------------------------------------------------------------------

class ModeUnavailable(Exception):
    pass


def spark_streams() -> type[SparkStreams]:
    """strom's Spark runtime, imported when first used (it registers its configuration keys): the plain
    loop's process, which imports this file, then starts without PySpark, as a plain application would."""
    from strom.spark.runtime import SparkStreams

    return SparkStreams


def execution_props(mode: str) -> dict[str, str]:
    """``execution.mode`` as this strom takes it; nothing for micro-batch on a strom without the key."""
    spark_streams()
    try:
        StreamsConfig({"application.id": "probe", "execution.mode": mode})
    except ConfigError as exc:
        if mode == "microbatch" and "Unknown configuration key" in str(exc):
            return {}
        raise ModeUnavailable(str(exc)) from None
    return {"execution.mode": mode}


def count_topology(topics: Topics, parse: ParseJson) -> Topology:
    builder = StreamsBuilder()
    (builder.stream(topics.source, Consumed.with_(Serdes.String(), Serdes.String()))
        .map_values(parse)
        .group_by_key()
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to(topics.sink, Produced.with_(Serdes.String(), Serdes.Long())))
    return builder.build()


class StromContestant:
    def __init__(self, spark: Any, mode: str, state_dir: str) -> None:
        self.props = execution_props(mode)
        self.name = mode
        self.label = f"strom {mode}" + ("" if self.props else " (no execution.mode key)")
        self.group = f"pipeline-{mode}-{uuid.uuid4().hex[:8]}"
        self._spark, self._state_dir = spark, state_dir
        self._app: SparkStreams | None = None

    def start(self, bootstrap: str, topics: Topics, mark: str) -> None:
        self._app = spark_streams()(count_topology(topics, ParseJson(mark)), {
            "application.id": self.group, "bootstrap.servers": bootstrap,
            "processing.guarantee": "exactly_once_v2", "commit.interval.ms": COMMIT_INTERVAL_MS,
            "state.dir": self._state_dir, **self.props}, self._spark)
        self._app.start()

    def check(self) -> None:
        assert self._app is not None
        if self._app.state is self._app.State.ERROR:
            self._app.await_termination(0)  # raises with Spark's message
            raise RuntimeError(f"{self.label} failed")

    def stop(self) -> None:
        if self._app is not None:
            self._app.stop()


# --- measuring ------------------------------------------------------------------------------------

def wait_committed(bootstrap: str, contestant: Contestant, topics: Topics, ends: dict[int, int]) -> float:
    """``time.time()`` when the contestant's group has committed ``ends`` of every input partition.
    (Read with the admin API: a consumer with the contestant's group.id would be a client of its
    group.)"""
    admin = clients.admin(bootstrap)
    request = [ConsumerGroupTopicPartitions(contestant.group, [TopicPartition(topics.source, p)
                                                              for p in range(topics.partitions)])]
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while time.monotonic() < deadline:
        future = admin.list_consumer_group_offsets(request, request_timeout=10)[contestant.group]
        if all(tp.offset >= ends[tp.partition] for tp in future.result().topic_partitions):
            return time.time()
        contestant.check()
        time.sleep(0.02)
    raise RuntimeError(f"{contestant.label} did not commit its input in {CATCH_UP_TIMEOUT_S:.0f} s")


class OutputReader:
    """The output topic read read_committed from its start: the last count per key and, for records
    stamped at or after ``timed_since_ms``, the latency now - timestamp in ms. (Made once phase A is
    over: an assigned consumer fetches in the background and would compete with the contestant.)"""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.consumer = clients.consumer(bootstrap)
        self.consumer.assign([TopicPartition(topics.sink, p, OFFSET_BEGINNING)
                              for p in range(topics.partitions)])
        self.counts: dict[bytes, int] = {}
        self.latencies_ms: list[float] = []
        self.timed_since_ms: int | None = None
        self.complete = False

    def read_until(self, expected: Counter[bytes], timeout: float) -> bool:
        """Reads until every key has its expected count (``complete``); False after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.counts != expected:
            if time.monotonic() > deadline:
                return False
            records = available(self.consumer, 0.1)
            now_ms = time.time() * 1000
            for record in records:
                self.counts[record.key()] = LONG.unpack(record.value())[0]
                stamped = self.stamp(record)
                if self.timed_since_ms is not None and stamped >= self.timed_since_ms:
                    self.latencies_ms.append(now_ms - stamped)
        self.complete = True
        return True

    def stamp(self, record: Any) -> int:
        """When the record's input was produced, in ms: its own timestamp (the pipeline keeps it)."""
        return record.timestamp()[1]

    def __enter__(self) -> OutputReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.consumer.close()


def wrong_counts(phase: str, reader: OutputReader, expected: Counter[bytes]) -> str:
    keys = expected.keys() | reader.counts.keys()
    wrong = sum(1 for key in keys if reader.counts.get(key) != expected[key])
    return f"WRONG after phase {phase}: {wrong} of {len(expected)} keys without their expected count"


def send_steady(producer: Producer, topic: str, first: int, rate: int, seconds: int, keys: int) -> float:
    """Sends ``rate * seconds`` records, record i due i/rate s after the start and stamped with its
    send time; returns the rate achieved."""
    total, sent, started = rate * seconds, 0, time.monotonic()
    while sent < total:
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        for i in range(first + sent, first + due):
            clients.produce(producer, topic, record_value(i, keys), record_key(i, keys),
                            timestamp=int(time.time() * 1000))
        sent = due
        producer.poll(0)
        time.sleep(SEND_TICK_S)
    assert producer.flush(60) == 0, "phase B's input was not all written in 60 s"
    return total / (time.monotonic() - started)


def percentile(ordered: list[float], fraction: float) -> float:
    """Nearest rank."""
    return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]


@dataclass
class Figures:
    label: str
    records_per_s: float = 0.0
    processing_s: float = 0.0
    wall_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    timed: int = 0
    """Output records whose latency was taken."""
    sent_per_s: float = 0.0
    problem: str = ""

    def take_latencies(self, latencies_ms: list[float]) -> None:
        ordered = sorted(latencies_ms)
        self.timed = len(ordered)
        if ordered:
            self.p50_ms, self.p99_ms, self.max_ms = (percentile(ordered, q) for q in (0.5, 0.99, 1.0))


MEDIAN_FIGURES = ("records_per_s", "processing_s", "wall_s", "p50_ms", "p99_ms", "max_ms", "timed",
                  "sent_per_s")


def medians(rounds: list[list[Figures]]) -> list[Figures]:
    """Per contestant, the median of each figure over the rounds it ran without a problem."""
    runs: dict[str, list[Figures]] = {}
    for row in (row for rows in rounds for row in rows if not row.problem):
        runs.setdefault(row.label, []).append(row)
    return [Figures(label, **{name: statistics.median(getattr(f, name) for f in figures)
                              for name in MEDIAN_FIGURES})
            for label, figures in runs.items()]


class Trial:
    """One contestant on topics of its own, filled by a producer of its own."""

    def __init__(self, bootstrap: str, contestant: Contestant, args: argparse.Namespace,
                 workdir: str) -> None:
        self.bootstrap, self.contestant, self.args = bootstrap, contestant, args
        self.topics = fresh_topics(bootstrap, contestant.name, args.partitions)
        self.producer = input_producer(bootstrap)
        self.mark = os.path.join(workdir, f"{contestant.group}-first-record")
        self.figures = Figures(contestant.label)

    def run(self, records: int, latency: bool) -> Figures:
        """Phase A on ``records`` records, then (if ``latency``) phase B; stops the contestant."""
        fill(self.producer, self.topics.source, 0, records, self.args.keys)
        ends = end_offsets(self.bootstrap, self.topics)
        started = time.time()
        try:
            self.contestant.start(self.bootstrap, self.topics, self.mark)
            last_commit = wait_committed(self.bootstrap, self.contestant, self.topics, ends)
            with open(self.mark) as file:
                first_record = float(file.read())
            self.figures.processing_s, self.figures.wall_s = last_commit - first_record, last_commit - started
            self.figures.records_per_s = records / self.figures.processing_s
            expected = expected_counts(0, records, self.args.keys)
            with OutputReader(self.bootstrap, self.topics) as reader:
                if not reader.read_until(expected, READ_TIMEOUT_S):
                    self.figures.problem = wrong_counts("A", reader, expected)
                elif latency:
                    self.measure_latency(reader, records)
        finally:
            self.contestant.stop()
        return self.figures

    def measure_latency(self, reader: OutputReader, first: int) -> None:
        """Phase B: input records ``first`` on at a steady rate, the reader timing every output record."""
        args = self.args
        expected = expected_counts(0, first + args.rate * args.seconds, args.keys)
        reader.timed_since_ms = int(time.time() * 1000)  # whole ms, as the records' timestamps
        following = threading.Thread(target=reader.read_until, daemon=True,
                                     args=(expected, args.seconds + READ_TIMEOUT_S))
        following.start()
        self.figures.sent_per_s = send_steady(self.producer, self.topics.source, first, args.rate,
                                              args.seconds, args.keys)
        wait_committed(self.bootstrap, self.contestant, self.topics, end_offsets(self.bootstrap, self.topics))
        following.join(READ_TIMEOUT_S)
        self.figures.take_latencies(reader.latencies_ms)
        if not reader.complete:
            self.figures.problem = wrong_counts("B", reader, expected)


# --- the run --------------------------------------------------------------------------------------

def run_all(bootstrap: str, workdir: str, args: argparse.Namespace) -> list[list[Figures]]:
    """``--repeat`` rounds of the chosen contestants in order, each round's table printed as it ends;
    one Spark session for the strom modes, each warmed up before its first round."""
    rounds: list[list[Figures]] = []
    spark, warm = None, set()
    for number in range(1, args.repeat + 1):
        rows: list[Figures] = []
        for mode in args.modes:
            if mode == "plain":
                contestant: Contestant = PlainContestant()
            else:
                try:
                    execution_props(mode)
                except ModeUnavailable as exc:
                    print(f"strom {mode}: unavailable in this strom ({exc})", flush=True)
                    continue
                spark = spark or start_spark()
                if mode not in warm:
                    warm_up(bootstrap, StromContestant(spark, mode, workdir), args, workdir)
                    warm.add(mode)
                contestant = StromContestant(spark, mode, workdir)
            rows.append(run_or_fail(bootstrap, contestant, args, args.records, latency=True,
                                    workdir=workdir))
        print_table(f"round {number} of {args.repeat}", rows)
        rounds.append(rows)
    if spark is not None:
        spark.stop()
    return rounds


def warm_up(bootstrap: str, contestant: StromContestant, args: argparse.Namespace, workdir: str) -> None:
    figures = run_or_fail(bootstrap, contestant, args, WARM_UP_RECORDS, latency=False, workdir=workdir)
    print(f"warm-up, {figures.label}: {WARM_UP_RECORDS:,} records, {figures.wall_s:.1f} s wall "
          f"(cold start) {figures.problem}", flush=True)


def run_or_fail(bootstrap: str, contestant: Contestant, args: argparse.Namespace, records: int,
                latency: bool, workdir: str) -> Figures:
    """``Trial.run``; a contestant that fails gets a row saying so, and the others still run."""
    try:
        return Trial(bootstrap, contestant, args, workdir).run(records, latency)
    except Exception as exc:
        log.exception("%s failed", contestant.label)
        return Figures(contestant.label, problem=f"FAILED: {exc}")


def start_spark() -> Any:
    import strom.spark

    started = time.monotonic()
    spark = strom.spark.session(app_name="strom-bench-pipeline", log_level="ERROR")
    print(f"Spark session (local[2]): {time.monotonic() - started:.1f} s", flush=True)
    return spark


def print_table(title: str, rows: list[Figures]) -> None:
    plain = next((f for f in rows if f.label == PlainContestant.label and f.timed), None)
    print(f"\n{title}\n{'contestant':<44}{'records/s':>11}{'processing s':>14}{'wall s':>8}"
          f"{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'rate/plain':>12}{'p99/plain':>11}")
    for f in rows:
        latency = [f"{ms:.0f}" if f.timed else "-" for ms in (f.p50_ms, f.p99_ms, f.max_ms)]
        rate_ratio = f"{f.records_per_s / plain.records_per_s:.2f}x" if plain else "-"
        p99_ratio = f"{f.p99_ms / plain.p99_ms:.2f}x" if plain and f.timed else "-"
        print(f"{f.label:<44}{f.records_per_s:>11,.0f}{f.processing_s:>14.2f}{f.wall_s:>8.1f}"
              + "".join(f"{value:>8}" for value in latency) + f"{rate_ratio:>12}{p99_ratio:>11}")
    for f in rows:
        if f.timed:
            print(f"  {f.label}: {f.timed:,.0f} output records timed; input sent at "
                  f"{f.sent_per_s:,.0f} records/s")
        if f.problem:
            print(f"  {f.label}: {f.problem}", flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="realtime,microbatch,plain",
                        help="contestants, comma-separated, run in this order: " + ",".join(MODES))
    parser.add_argument("--records", type=int, default=200_000, help="phase A: records in the input")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rate", type=int, default=2_000, help="phase B: records/s sent")
    parser.add_argument("--seconds", type=int, default=30, help="phase B: how long")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of all contestants, interleaved; more than one adds a table of medians")
    args = parser.parse_args()
    args.modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        parser.error(f"unknown --mode {', '.join(sorted(unknown))}; choose from {', '.join(MODES)}")
    return args


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(describe())
    print(f"count-by-key of JSON records: {args.records:,} records, {args.keys:,} keys, "
          f"{args.partitions} partitions, exactly_once_v2, commit.interval.ms={COMMIT_INTERVAL_MS}; "
          f"latency at {args.rate:,} records/s for {args.seconds} s, nothing discarded", flush=True)
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="strom-pipeline-") as workdir:
        rounds = run_all(broker.bootstrap_servers, workdir, args)
    if len(rounds) > 1:
        print_table(f"medians of {len(rounds)} rounds (rounds with a problem left out)", medians(rounds))
    return 1 if any(f.problem for rows in rounds for f in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
