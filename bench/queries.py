"""Interactive queries against a running application: latency, throughput and the driver's cost.

    python bench/queries.py [--keys 1000000] [--queries 2000] [--clients 8] [--seconds 5] [--rate 2000]
                            [--rounds 3] [--cluster]

An embedded broker; a count-by-key application (exactly_once_v2, real-time mode, two stream threads on
Spark local[2], or with ``--cluster`` on a standalone cluster of two one-core workers started from
pyspark's own spark-class as the tests start one (tests/support/spark_cluster.py), the driver in this
process; RocksDB store, the counts written to an output topic) counts ``--keys`` distinct keys, one
record each, until caught up. Then, while records keep arriving at ``--rate`` per second:
``--seconds`` without queries (processing latency alone), the first key query (timed), the driver's RSS
and its copies' disk before and after, ``--queries`` sequential key queries from Python
(``SparkStreams.query``) and over HTTP (``query.http.port``, one kept-alive connection), and the
``--clients`` Python threads querying together at ``--query-rate`` per second for ``--seconds``; that
and ``--seconds`` without queries alternate ``--rounds`` times in all; then the clients query as fast
as they can for ``--seconds`` (queries per second). Every answer is checked: each key's count
is 1 or more, and the key's partition alone answered it (the query went to the worker holding the key).

Processing latency: an output record read read_committed (by a consumer in a process of its own), minus
the send time of the input record it counts (its timestamp), for the inputs sent in each phase; their
p99s compare processing alone with processing while queried at ``--query-rate`` and as fast as the
clients can (on a small machine the clients, the driver and the workers share its cores). The quiet and
paced phases alternate, and each kind's p99 is taken over all its rounds' inputs, so that a stall of a
few hundred milliseconds (a RocksDB flush, a full garbage collection) that falls into one 5 s phase
does not decide the comparison alone; each round's pair is printed too. The last line is the summary.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # support.spark_cluster

from confluent_kafka import OFFSET_END, TopicPartition

from machine import describe
from strom.broker import EmbeddedBroker
from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.spark.runtime import SparkStreams
from strom.streams import (
    Consumed,
    KeyQuery,
    Materialized,
    Produced,
    Serdes,
    StateQueryRequest,
    StreamsBuilder,
)

S = Serdes.String()


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6 if path.exists() else 0.0


def fill(bootstrap: str, topic: str, keys: range) -> None:
    producer = clients.producer(bootstrap, **JAVA_PARTITIONER, **{"linger.ms": 50})
    for i in keys:
        while True:
            try:
                producer.produce(topic, b"x", f"key-{i}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def produce_steadily(bootstrap: str, topic: str, keys: int, rate: int, stop: threading.Event) -> None:
    producer = clients.producer(bootstrap, **JAVA_PARTITIONER, **{"linger.ms": 5})
    rng = random.Random(1)
    while not stop.is_set():
        started = time.monotonic()
        for _ in range(rate // 10):
            producer.produce(topic, b"x", f"key-{rng.randrange(keys)}".encode())
        producer.poll(0)
        stop.wait(max(0.0, 0.1 - (time.monotonic() - started)))
    producer.flush(30)


def read_latencies(bootstrap: str, topic: str, partitions: int, connection: Connection) -> None:
    """Reads the output topic from its end, read_committed, until told to stop; then sends, per output
    record, when its input was sent (its timestamp, ms) and how long ago that was when it was read (ms)."""
    consumer = clients.consumer(bootstrap)
    clients.assign(consumer, [TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
    samples: list[tuple[float, float]] = []
    connection.send("reading")
    while not connection.poll():
        for record in consumer.consume(1000, timeout=0.05):
            if record.error() is None:
                sent = record.timestamp()[1]
                samples.append((sent, time.time() * 1000 - sent))
    consumer.close()
    connection.send(samples)


class LatencyReader:
    """``read_latencies`` in a process of its own, as a downstream consumer would be: in the driver's
    process it would wait for the interpreter lock behind the query clients, and that wait would count
    as processing latency."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.samples: list[tuple[float, float]] = []
        context = multiprocessing.get_context("spawn")
        self._connection, theirs = context.Pipe()
        self._process = context.Process(target=read_latencies, args=(bootstrap, topic, partitions, theirs),
                                        name="latency-reader", daemon=True)
        self._process.start()
        assert self._connection.recv() == "reading"

    def p99_within(self, *windows: tuple[float, float]) -> tuple[float, int]:
        """p99 latency (ms) of the inputs sent within the windows (``time.time()`` instants, start and
        end), and their count."""
        taken = [ms for sent, ms in self.samples
                 if any(start_s * 1000 <= sent < end_s * 1000 for start_s, end_s in windows)]
        return (p99(taken) if taken else float("nan")), len(taken)

    def close(self) -> None:
        """Stops the reader and takes its samples."""
        if self._process.is_alive():
            self._connection.send("stop")
            self.samples = self._connection.recv()
        self._process.join()


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98] if len(samples) > 1 else samples[0]


def key_query(app: SparkStreams, key: str) -> int:
    result = app.query(StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(key)))
    found = result.get_only_partition_result().get_result()  # routed: the key's partition alone asked
    assert found is not None and found >= 1, (key, result)
    return found


def http_query(connection: http.client.HTTPConnection, key: str) -> int:
    connection.request("GET", f"/stores/counts/keys/{key}")
    response = connection.getresponse()
    body = json.loads(response.read())
    assert response.status == 200 and body["value"] >= 1, (key, response.status, body)
    return body["value"]


def timed(call, keys: list[str]) -> list[float]:  # type: ignore[no-untyped-def]
    samples = []
    for key in keys:
        started = time.perf_counter()
        call(key)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def throughput(app: SparkStreams, keys: int, clients_: int, seconds: float,
               rate: float | None = None) -> float:
    """Queries per second of ``clients_`` threads for ``seconds``: as fast as they go, or together at
    ``rate`` (each query due at its time; a late one goes at once)."""
    done = [0] * clients_
    started = time.monotonic()
    deadline = started + seconds

    def client(index: int) -> None:
        rng = random.Random(index)
        while (now := time.monotonic()) < deadline:
            if rate is not None:
                due = started + (done[index] * clients_ + index) / rate
                if due > now:
                    time.sleep(due - now)
                    continue
            key_query(app, f"key-{rng.randrange(keys)}")
            done[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients_)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--query-rate", type=int, default=2000,
                        help="queries/s of the paced phase (processing latency while queried at this rate)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="quiet and paced phases, alternated this many times each")
    parser.add_argument("--cluster", action="store_true",
                        help="a standalone cluster of two one-core workers instead of local[2]")
    args = parser.parse_args()
    print(describe())
    print(f"{'standalone cluster of 2 one-core workers' if args.cluster else 'local[2]'}; "
          f"load {os.getloadavg()[0]:.2f}")
    import strom.spark

    state_dir = Path(tempfile.mkdtemp(prefix="strom-bench-queries-"))
    with EmbeddedBroker() as broker, contextlib.ExitStack() as cluster_running:
        master, conf = "local[2]", {}
        if args.cluster:
            from support.spark_cluster import SparkCluster

            cluster = cluster_running.enter_context(SparkCluster(state_dir / "cluster", workers=2))
            master = cluster.master_url
            conf = {**cluster.driver_conf(), "spark.cores.max": "2", "spark.executor.cores": "1"}
        spark = strom.spark.session(app_name="strom-bench-queries", master=master, config=conf,
                                    log_level="ERROR")
        source = f"bench-queries-{uuid.uuid4().hex[:8]}"
        sink = f"{source}-counts"
        clients.create_topics(broker.bootstrap_servers, {source: 2, sink: 2})
        started = time.monotonic()
        fill(broker.bootstrap_servers, source, range(args.keys))
        print(f"filled {args.keys} keys in {time.monotonic() - started:.1f} s")
        builder = StreamsBuilder()
        counts = Materialized.as_("counts")
        table = builder.stream(source, Consumed.with_(S, S)).group_by_key().count(materialized=counts)
        table.to_stream().to(sink, Produced.with_(S, Serdes.Long()))
        app_id = f"bench-queries-{uuid.uuid4().hex[:8]}"
        app = SparkStreams(builder.build(), {
            "application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
            "processing.guarantee": "exactly_once_v2", "state.dir": str(state_dir), "num.stream.threads": 2,
            "query.http.port": 0}, spark)
        app.start()
        stop = threading.Event()
        reader: LatencyReader | None = None
        try:
            started = time.monotonic()
            assert app.wait_until_caught_up(3600), f"lag {app.lag()}"
            print(f"counted in {time.monotonic() - started:.1f} s; load {os.getloadavg()[0]:.2f}")
            reader = LatencyReader(broker.bootstrap_servers, sink, 2)
            writer = threading.Thread(target=produce_steadily,
                                      args=(broker.bootstrap_servers, source, args.keys, args.rate, stop))
            writer.start()
            time.sleep(2)  # the steady flow settles
            quiet = [(time.time(), time.time() + args.seconds)]
            time.sleep(args.seconds)
            rss_before, disk_before = rss_mb(), disk_mb(state_dir / app_id / "query")
            processed_before = app.progress.records
            started = time.perf_counter()
            key_query(app, f"key-{args.keys // 2}")
            first_ms = (time.perf_counter() - started) * 1000
            rng = random.Random(7)
            keys = [f"key-{rng.randrange(args.keys)}" for _ in range(args.queries)]
            python_ms = timed(lambda key: key_query(app, key), keys)
            host, port = app.query_url.removeprefix("http://").split(":")
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            http_ms = timed(lambda key: http_query(connection, key), keys)
            connection.close()
            paced, rates = [], []
            for round_ in range(args.rounds):
                if round_:
                    quiet.append((time.time(), time.time() + args.seconds))
                    time.sleep(args.seconds)
                started_s = time.time()
                rates.append(throughput(app, args.keys, args.clients, args.seconds, args.query_rate))
                paced.append((started_s, time.time()))
            paced_per_s = statistics.mean(rates)
            queried = time.time()
            per_s = throughput(app, args.keys, args.clients, args.seconds)
            queried = (queried, time.time())
            rss_after, disk_after = rss_mb(), disk_mb(state_dir / app_id / "query")
            processed = app.progress.records - processed_before
            load = os.getloadavg()[0]
            time.sleep(3)  # the queried seconds' last inputs reach the output (committed)
            reader.close()
            quiet_p99, quiet_n = reader.p99_within(*quiet)
            paced_p99, paced_n = reader.p99_within(*paced)
            queried_p99, queried_n = reader.p99_within(queried)
            rounds = [(reader.p99_within(alone)[0], reader.p99_within(asked)[0])
                      for alone, asked in zip(quiet, paced, strict=True)]
        finally:
            stop.set()
            if reader is not None:
                reader.close()
            app.stop()
            spark.stop()
    print(f"first query {first_ms:.1f} ms; python p50 {statistics.median(python_ms):.2f} ms p99 "
          f"{p99(python_ms):.2f} ms; http p50 {statistics.median(http_ms):.2f} ms p99 {p99(http_ms):.2f} ms; "
          f"{per_s:.0f} queries/s with {args.clients} clients; {processed} records processed meanwhile; "
          f"driver RSS {rss_before:.0f} -> {rss_after:.0f} MB, copies' disk {disk_before:.1f} -> "
          f"{disk_after:.1f} MB; processing p99 {quiet_p99:.0f} ms alone ({quiet_n} outputs), "
          f"{paced_p99:.0f} ms at {paced_per_s:.0f} queries/s ({paced_n} outputs), {queried_p99:.0f} ms "
          f"at {per_s:.0f} queries/s ({queried_n} outputs); load {load:.2f}")
    print("rounds, processing p99 alone -> at the paced rate: " + ", ".join(
        f"{alone:.0f} -> {asked:.0f} ms ({(asked / alone - 1) * 100:+.0f}%)" for alone, asked in rounds))
    print(f"queries: key p99 {p99(python_ms):.1f} ms python, {p99(http_ms):.1f} ms http, "
          f"{per_s:.0f} queries/s, first query {first_ms:.0f} ms, "
          f"driver RSS +{max(0.0, rss_after - rss_before):.0f} MB, "
          f"processing p99 {quiet_p99:.0f} -> {paced_p99:.0f} ms at {paced_per_s:.0f} queries/s "
          f"({(paced_p99 / quiet_p99 - 1) * 100:+.0f}%), -> {queried_p99:.0f} ms at {per_s:.0f} queries/s "
          f"({(queried_p99 / quiet_p99 - 1) * 100:+.0f}%)")


if __name__ == "__main__":
    main()
