"""`strom demo`: page views counted per page on Spark, exactly-once, checked against a recount.

End to end on one machine: an embedded broker (or ``--bootstrap-servers``), topics, a stream of
page-view events keyed by user, a topology that re-keys by page (a repartition topic) and counts
(a RocksDB store with a changelog), run by SparkStreams on local Spark; the output is read
read_committed and compared with counts computed directly from the generated events.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import click
from confluent_kafka import KafkaError, TopicPartition
from rich.console import Console
from rich.table import Table

from strom.broker import EmbeddedBroker
from strom.cli import output
from strom.cli.connection import Connection, connection_options
from strom.cli.spark_session import spark_session_starting
from strom.kafka import clients
from strom.streams import (
    Consumed,
    Grouped,
    Materialized,
    Produced,
    QueryableStoreTypes,
    Serdes,
    StoreQueryParameters,
    StreamsBuilder,
    Topology,
)

STRING, LONG, JSON = Serdes.String(), Serdes.Long(), Serdes.Json()
STORE = "views-per-page"
PAGES = ("/", "/search", "/cart", "/checkout", "/help", "/about", "/blog", "/pricing", "/login", "/docs")


@dataclass
class DemoResult:
    records_in: int = 0
    records_out: int = 0
    execution_mode: str = "realtime"
    spark_s: float = 0.0
    """Building the Spark session (the JVM's start, beside the embedded broker's)."""
    first_record_s: float | None = None
    """From ``SparkStreams.start()`` to the first record committed (Spark starting the stream tasks)."""
    writing_s: float = 0.0
    """Writing the measured page views (they are processed while being written)."""
    processing_s: float | None = None
    """From the first measured page view written to the last commit: the steady run."""
    latencies_ms: list[float] = field(default_factory=list)
    """Per output record of the measured run: read_committed arrival minus the record's timestamp."""
    stream_threads: int = 0
    commits: int = 0
    task_batches: int = 0
    reused: int = 0
    micro_batches: int = 0
    expected: Counter[str] = field(default_factory=Counter)
    updates: dict[str, list[int]] = field(default_factory=dict)
    queried: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float | None:
        return self.records_in / self.processing_s if self.processing_s else None

    def latency_ms(self, quantile: float) -> float | None:
        """Nearest-rank percentile of the measured run's end-to-end latencies."""
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(quantile * len(ordered)) - 1))]

    @property
    def ok(self) -> bool:
        return not self.problems


def page_view_counts(views_topic: str, counts_topic: str) -> Topology:
    """Page views keyed by user → re-keyed by page (repartition) → count per page."""
    builder = StreamsBuilder()
    (builder.stream(views_topic, Consumed.with_(STRING, JSON))
        .group_by(lambda user, view: view["page"], Grouped.as_("views-by-page").with_key_serde(STRING)
                  .with_value_serde(JSON))
        .count(materialized=Materialized.as_(STORE))
        .to_stream()
        .to(counts_topic, Produced.with_(STRING, LONG)))
    return builder.build()


def produce_page_views(connection: Connection, topic: str, records: int, seed: int) -> Counter[str]:
    """Writes ``records`` page views timestamped as written; returns the true count per page."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(PAGES))]
    producer = connection.producer(**clients.JAVA_PARTITIONER, **{"linger.ms": 5})
    expected: Counter[str] = Counter()
    for _ in range(records):
        page = rng.choices(PAGES, weights)[0]
        user = f"user-{rng.randrange(1000)}"
        expected[page] += 1
        clients.produce(producer, topic, json.dumps({"user": user, "page": page}).encode(), user.encode())
    if producer.flush(60):
        raise click.ClickException(f"Could not write the page views to {topic} at "
                                   f"{connection.bootstrap_servers}.")
    return expected


class LatencyReader(threading.Thread):
    """Reads the output read_committed while the application runs: for each record stamped at or after
    ``since_ms``, its arrival minus its timestamp (the input record's that produced it) is its
    end-to-end latency: written, processed, committed, readable."""

    def __init__(self, connection: Connection, topic: str, partitions: int) -> None:
        super().__init__(name="strom-demo-latency", daemon=True)
        self._consumer = connection.consumer(**{
            "enable.partition.eof": True, "isolation.level": "read_committed", "fetch.wait.max.ms": 10})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._connection = connection
        self._topic = topic
        self._partitions = partitions
        self._positions: dict[int, int] = {}
        """Per partition, the offset after the last record read (or the end it reached)."""
        self.since_ms = float("inf")
        self.latencies_ms: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for message in self._consumer.consume(1000, 0.1):
                    now_ms = time.time() * 1000
                    error = message.error()
                    if error is None:
                        stamped = message.timestamp()[1]
                        if stamped >= self.since_ms:
                            self.latencies_ms.append(now_ms - stamped)
                        self._positions[message.partition()] = message.offset() + 1
                    elif error.code() == KafkaError._PARTITION_EOF:
                        self._positions[message.partition()] = message.offset()
        finally:
            self._consumer.close()

    def read_to_end(self, timeout: float) -> bool:
        """Waits until every record committed so far is read: each partition's position at or past
        its end offset now (commit markers included), or the end it reported; False on timeout."""
        asking = self._connection.consumer()  # the reader's own consumer is busy in its thread
        try:
            ends = {p: asking.get_watermark_offsets(TopicPartition(self._topic, p), timeout)[1]
                    for p in range(self._partitions)}
        finally:
            asking.close()
        deadline = time.monotonic() + timeout
        while any(self._positions.get(p, -1) < end for p, end in ends.items()):
            if time.monotonic() > deadline or not self.is_alive():
                return False
            time.sleep(0.01)
        return True


def read_committed(connection: Connection, topic: str, partitions: int) -> dict[str, list[int]]:
    """Every update in the output, in order per key, as a read_committed consumer sees it."""
    consumer = connection.consumer(**{"enable.partition.eof": True, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    updates: dict[str, list[int]] = defaultdict(list)
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                error = message.error()
                if error is None:
                    updates[STRING.deserializer().deserialize(topic, message.key())].append(
                        LONG.deserializer().deserialize(topic, message.value()))
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
    finally:
        consumer.close()
    return dict(updates)


def verify(result: DemoResult) -> None:
    """Each key's updates must rise strictly (an update written twice would repeat a value) and end
    at the recount."""
    for page in sorted(set(result.expected) | set(result.updates)):
        seen = result.updates.get(page, [])
        if not seen:
            result.problems.append(f"{page}: no output")
        elif seen != sorted(set(seen)):
            result.problems.append(f"{page}: duplicate or out-of-order updates {seen[:10]}...")
        elif seen[-1] != result.expected[page]:
            result.problems.append(f"{page}: final count {seen[-1]}, expected {result.expected[page]}")
    if result.queried != dict(result.expected):
        result.problems.append(f"the interactive query of store {STORE} gave {result.queried}, "
                               f"expected {dict(result.expected)}")


WARM_UP = 200
"""Page views written first, so the measured run starts on running stream tasks."""


def run_demo(connection: Connection, records: int, partitions: int, guarantee: str, timeout: float,
             console: Console, session: Future[Any], session_started: float,
             execution_mode: str = "realtime") -> DemoResult:
    """Starts the application on the ``session`` (started at ``session_started``), warms it up with
    a few page views, then measures ``records`` more written while it runs; everything written is
    verified."""
    run = uuid.uuid4().hex[:8]
    views, counts = f"demo-{run}-page-views", f"demo-{run}-views-per-page"
    connection.create_topics({views: partitions, counts: partitions})
    result = DemoResult(records_in=records, execution_mode=execution_mode)
    from strom.spark.runtime import SparkStreams  # imported by spark_session_starting already

    console.print("Starting Spark (local) and the topology...")
    spark = session.result()
    result.spark_s = time.monotonic() - session_started
    app = SparkStreams(page_view_counts(views, counts), {
        **connection.streams_config(), "application.id": f"strom-demo-{run}",
        "processing.guarantee": guarantee, "state.dir": tempfile.mkdtemp(prefix="strom-demo-"),
        "commit.interval.ms": 100, "max.offsets.per.trigger": max(1000, records // 3),
        "execution.mode": execution_mode}, spark)
    latency = LatencyReader(connection, counts, partitions)
    started = time.monotonic()
    app.start()
    try:
        result.expected = produce_page_views(connection, views, WARM_UP, seed=records + 1)
        result.first_record_s = _first_record(app, started, timeout)
        _wait_caught_up(app, timeout, result)
        latency.start()
        latency.read_to_end(timeout)
        console.print(f"Writing {records:,} page views to [bold]{views}[/] ({partitions} partitions) "
                      "while the application runs...")
        latency.since_ms = time.time() * 1000
        written = time.monotonic()
        result.expected += produce_page_views(connection, views, records, seed=records)
        result.writing_s = time.monotonic() - written
        if _wait_caught_up(app, timeout, result) and app.progress.last_commit is not None:
            result.processing_s = app.progress.last_commit - written
        latency.read_to_end(10)
        store = app.store(StoreQueryParameters.from_name(STORE, QueryableStoreTypes.key_value_store()))
        result.queried = dict(store.all())
    finally:
        latency.stop.set()
        app.stop()
    result.latencies_ms = latency.latencies_ms
    result.micro_batches = len(app.progress.batch_finished)
    result.stream_threads = getattr(app, "num_stream_threads", 0) if app.realtime else 0
    result.commits = sum(task.commits for task in app.progress.tasks.values())
    result.task_batches = sum(task.batches for task in app.progress.tasks.values())
    result.reused = app.progress.reused
    result.updates = read_committed(connection, counts, partitions)
    result.records_out = sum(len(v) for v in result.updates.values())
    verify(result)
    return result


def _first_record(app: Any, since: float, timeout: float) -> float | None:
    """Seconds from ``since`` to the first record the driver hears committed."""
    deadline = time.monotonic() + timeout
    while app.progress.records == 0 and time.monotonic() < deadline and app.state.value == "RUNNING":
        time.sleep(0.01)
    return time.monotonic() - since if app.progress.records else None


def _wait_caught_up(app: Any, timeout: float, result: DemoResult) -> bool:
    if app.wait_until_caught_up(timeout):
        return True
    result.problems.append(f"not caught up after {timeout:.0f}s (lag {app.lag()} records)")
    return False


def summary_table(result: DemoResult, guarantee: str) -> Table:
    table = Table(title=f"strom demo: page views per page on Spark ({guarantee}, {result.execution_mode})")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("page views measured (after a warm-up of " + f"{WARM_UP})", f"{result.records_in:,}")
    table.add_row("updates out (read_committed)", f"{result.records_out:,}")
    table.add_row("start-up: Spark session (started with the broker)", f"{result.spark_s:.1f} s")
    first = "-" if result.first_record_s is None else f"{result.first_record_s:.1f} s"
    table.add_row("start-up: application start to first record committed", first)
    table.add_row("writing the measured page views", f"{result.writing_s:.2f} s")
    if result.rate is not None and result.processing_s is not None:
        table.add_row("steady rate (first page view written to last commit)",
                      f"{result.rate:,.0f} records/s ({result.processing_s:.2f} s)")
    p50, p99 = result.latency_ms(0.5), result.latency_ms(0.99)
    if p50 is not None and p99 is not None:
        table.add_row("end-to-end latency p50 / p99 (timestamp to read_committed)",
                      f"{p50:,.0f} / {p99:,.0f} ms ({len(result.latencies_ms):,} updates)")
    if result.execution_mode == "realtime":
        table.add_row("  stream threads (long-running Spark tasks)", f"{result.stream_threads}")
        table.add_row("  task commits (commit.interval.ms 100)", f"{result.commits:,}")
    else:
        table.add_row("  micro-batches (one per commit)", f"{result.micro_batches}")
        table.add_row("  task batches (on tasks kept open)", f"{result.task_batches} ({result.reused})")
    for page, count in result.expected.most_common(5):
        final = result.updates.get(page, [None])[-1]
        table.add_row(f"  {page}", f"{final} (expected {count}, {len(result.updates.get(page, []))} updates)")
    table.add_row(f"interactive query of store {STORE}",
                  f"{len(result.queried)} pages, {sum(result.queried.values()):,} views")
    table.add_row("verification", "[green]OK[/]" if result.ok else "[red]FAILED[/]")
    return table


@click.command()
@click.option("--records", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Page views written while the application runs (the measured run).")
@click.option("--partitions", type=click.IntRange(min=1), default=2, show_default=True,
              help="Partitions of the input topic.")
@click.option("--guarantee", type=click.Choice(["exactly_once_v2", "at_least_once"]),
              default="exactly_once_v2", show_default=True, help="processing.guarantee.")
@click.option("--execution-mode", type=click.Choice(["realtime", "microbatch"]), default="realtime",
              show_default=True,
              help="execution.mode: long-running stream threads, or one Spark micro-batch per commit.")
@click.option("--keep-broker", is_flag=True, help="Leave the embedded broker running afterwards.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="Seconds to wait for the result.")
@connection_options(default="")
def demo(records: int, partitions: int, guarantee: str, execution_mode: str, connection: Connection,
         keep_broker: bool, timeout: float) -> None:
    """Count page views per page on Spark with exactly-once, then verify the output.

    On an embedded broker unless -b names a cluster (-X and --command-config then reach every client:
    the demo's own, and the application's as its producer., consumer. and admin. settings)."""
    console = output.console()
    connection.producer(log_level=0)  # a bad -X property is one error line, before Spark starts
    session_started = time.monotonic()
    session = spark_session_starting("strom-demo", strom_format=False)  # the JVM starts with the broker
    broker = None
    if not connection.bootstrap_servers:
        data_dir = tempfile.mkdtemp(prefix="strom-demo-broker-") if keep_broker else None
        broker = EmbeddedBroker(data_dir=data_dir)
        broker.start()
        connection = dataclasses.replace(connection, bootstrap_servers=broker.bootstrap_servers)
        console.print(f"Embedded broker at [bold]{connection.bootstrap_servers}[/]")
    try:
        result = run_demo(connection, records, partitions, guarantee, timeout, console, session,
                          session_started, execution_mode)
    finally:
        if broker is not None and not keep_broker:
            broker.__exit__(None, None, None)
    console.print(summary_table(result, guarantee))
    for problem in result.problems:
        console.print(f"[red]{problem}[/]")
    if broker is not None and keep_broker:
        console.print(f"The broker keeps running at {connection.bootstrap_servers} "
                      f"(data in {broker.data_dir}).")
    if not result.ok:
        raise SystemExit(1)
