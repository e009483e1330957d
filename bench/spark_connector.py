"""Throughput of the "strom" Spark connector on local[2] against the embedded broker.

Prints rows/s for batch reads of 100 B and 1 KB values, and for batch writes with
delivery.guarantee at_least_once and exactly_once (targets: read >= 300k rows/s of 100 B values;
exactly-once write >= 0.85 of at-least-once). To tell the connector's cost from Spark's, it also
reads the same rows from a Python data source that makes them up without Kafka ("Spark alone"),
and times a read of a single record (what every query costs before the first row). Reads are
repeated (connector and Spark alone in turn, so both see the same load) and each prints the CPU
it cost per row in the JVM, in Spark's Python workers (the reader and librdkafka's threads) and in
the broker, beyond what a one-record read of the same kind costs. A million rows by default: every
query first pays the one-record read's fixed cost (about half a second here), which would swamp the
rate of a smaller read (300k rows read in ~1.5 s, of which ~1 s is per-query cost).

    python bench/spark_connector.py [--records 1000000] [--partitions 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

import strom.spark
from strom.broker import EmbeddedBroker
from strom.kafka import clients
from strom.spark.connector.reader import ARROW_BATCH_ROWS
from strom.spark.connector.source import kafka_schema


def fill(bootstrap: str, topic: str, records: int, size: int) -> None:
    producer = clients.producer(bootstrap, **{"linger.ms": 20, "batch.size": 1_000_000,
                                              "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


@dataclass(frozen=True)
class _Share(InputPartition):
    index: int
    rows: int


class SparkAlone(DataSource):
    """Rows shaped like the connector's (Kafka schema, Arrow batches of the same size) but made
    up in the Python worker: what Spark itself costs per row, with no Kafka in the way."""

    @classmethod
    def name(cls) -> str:
        return "strom-bench-spark-alone"

    def schema(self) -> StructType:
        return kafka_schema(include_headers=False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _SparkAloneReader(schema, int(self.options["records"]), int(self.options["partitions"]))


class _SparkAloneReader(DataSourceReader):
    def __init__(self, schema: StructType, records: int, partitions: int) -> None:
        self._schema = schema
        self._records = records
        self._partitions = partitions

    def partitions(self) -> list[_Share]:
        share, extra = divmod(self._records, self._partitions)
        return [_Share(i, share + (i < extra)) for i in range(self._partitions)]

    def read(self, partition: _Share) -> Iterator[pa.RecordBatch]:
        n = ARROW_BATCH_ROWS
        batch = pa.RecordBatch.from_arrays([
            pa.array([str(i).encode() for i in range(n)], pa.binary()),
            pa.array([b"x" * 100] * n, pa.binary()),
            pa.repeat(pa.scalar("bench-100b", pa.string()), n),
            pa.repeat(pa.scalar(partition.index, pa.int32()), n),
            pa.array(np.arange(n, dtype=np.int64)),
            pa.array(np.full(n, 1_700_000_000_000_000)).cast(pa.timestamp("us", tz="UTC")),
            pa.array(np.zeros(n, dtype=np.int32)),
        ], schema=to_arrow_schema(self._schema, timezone="UTC"))
        for start in range(0, partition.rows, n):
            yield batch.slice(0, min(n, partition.rows - start))


def count_all(df: DataFrame, records: int) -> float:
    """Seconds to read every row and column (Python data sources cannot prune columns)."""
    started = time.perf_counter()
    [row] = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()
    seconds = time.perf_counter() - started
    assert row.n == records, (row.n, records)
    return seconds


ROLES = ("JVM", "Python workers", "broker")


def cpu_by_role() -> dict[str, float]:
    """CPU seconds used so far by this process's descendants (Linux /proc): the JVM, Spark's
    Python daemons and workers (with their exited children), the embedded broker."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        stats[int(pid)] = (int(fields[1]), stat[stat.index("(") + 1:stat.rindex(")")], cmdline,
                           [int(x) / ticks for x in fields[11:15]])
    cpu = dict.fromkeys(ROLES, 0.0)
    family, frontier = set(), [os.getpid()]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, *_) in stats.items() if ppid == parent]
        family.update(children)
        frontier += children
    for pid in family:
        _, name, cmdline, (user, system, children_user, children_system) = stats[pid]
        if name == "java":
            cpu["JVM"] += user + system
        elif b"strom.broker" in cmdline:
            cpu["broker"] += user + system
        else:
            cpu["Python workers"] += user + system + children_user + children_system
    return cpu


@dataclass
class Reading:
    """Repeated timings of one read and the mean CPU each cost by role."""

    records: int
    seconds: list[float]
    cpu: dict[str, float]

    @property
    def rows_per_second(self) -> float:
        return self.records / statistics.median(self.seconds)

    def cpu_per_row_us(self, fixed: Reading) -> str:
        rows = self.records - fixed.records
        return ", ".join(f"{role} {(self.cpu[role] - fixed.cpu[role]) / rows * 1e6:.1f}"
                         for role in ROLES)


def measure(reads: dict[str, tuple[int, Callable[[], float]]], repeat: int) -> dict[str, Reading]:
    """Runs each read (rows it reads, the read) ``repeat`` times, the reads in turn, so load changes
    hit them alike."""
    seconds: dict[str, list[float]] = {name: [] for name in reads}
    cpu = {name: dict.fromkeys(ROLES, 0.0) for name in reads}
    for _ in range(repeat):
        for name, (_, read) in reads.items():
            before = cpu_by_role()
            seconds[name].append(read())
            after = cpu_by_role()
            for role in ROLES:
                cpu[name][role] += (after[role] - before[role]) / repeat
    return {name: Reading(rows, seconds[name], cpu[name]) for name, (rows, _) in reads.items()}


def strom_read(spark, bootstrap: str, topic: str) -> DataFrame:
    return (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).load())


def bench_read(spark, bootstrap: str, topic: str, records: int) -> float:
    return records / count_all(strom_read(spark, bootstrap, topic), records)


def spark_alone(spark, records: int, partitions: int) -> float:
    """Seconds to read ``records`` made-up rows."""
    df = (spark.read.format(SparkAlone.name()).option("records", records)
          .option("partitions", partitions).load())
    return count_all(df, records)


def bench_write(spark, bootstrap: str, topic: str, records: int, partitions: int, guarantee: str) -> float:
    df = (spark.range(records, numPartitions=partitions)
          .select(F.col("id").cast("string").alias("key"), F.lit("x" * 100).alias("value")))
    writer = (df.write.format("strom").mode("append").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic).option("delivery.guarantee", guarantee))
    started = time.perf_counter()
    writer.save()
    return records / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each read")
    args = parser.parse_args()
    n, parts = args.records, args.partitions

    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        topics = {"bench-100b": parts, "bench-1kb": parts, "bench-warmup": parts,
                  "bench-alo": parts, "bench-eos": parts, "bench-one": 1}
        clients.create_topics(bootstrap, topics)
        fill(bootstrap, "bench-100b", n, 100)
        fill(bootstrap, "bench-1kb", n, 1000)
        fill(bootstrap, "bench-one", 1, 100)
        spark = strom.spark.session(app_name="strom-bench", log_level="ERROR")
        spark.dataSource.register(SparkAlone)
        # Warm-up: Python workers, JIT and code generation, so the figures measure steady state.
        # A full-size pass: the first large write and read are much slower than the ones after.
        bench_write(spark, bootstrap, "bench-warmup", n, parts, "at_least_once")
        bench_read(spark, bootstrap, "bench-warmup", n)
        spark_alone(spark, n, parts)

        print(f"strom Spark connector, local[2], {n} records, {parts} partitions "
              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        readings = measure({
            "read 100 B": (n, lambda: count_all(strom_read(spark, bootstrap, "bench-100b"), n)),
            "Spark alone": (n, lambda: spark_alone(spark, n, parts)),
            "read 1 record": (1, lambda: count_all(strom_read(spark, bootstrap, "bench-one"), 1)),
            "Spark alone 1 row": (1, lambda: spark_alone(spark, 1, parts)),
        }, args.repeat)
        read_small, alone = readings["read 100 B"], readings["Spark alone"]
        one, alone_one = readings["read 1 record"], readings["Spark alone 1 row"]
        print(f"  read  100 B values : {read_small.rows_per_second:>10,.0f} rows/s   (target >= 300,000; "
              f"median of {args.repeat}, best {n / min(read_small.seconds):,.0f})")
        print(f"  read  1 KB values  : {bench_read(spark, bootstrap, 'bench-1kb', n):>10,.0f} rows/s")
        print(f"  Spark alone        : {alone.rows_per_second:>10,.0f} rows/s   (same rows, no Kafka: "
              f"the ceiling; best {n / min(alone.seconds):,.0f})")
        print(f"  read  of 1 record  : {statistics.median(one.seconds):>10.2f} s        (fixed cost of "
              f"every query; Spark alone {statistics.median(alone_one.seconds):.2f} s)")
        print(f"  CPU per row, us    : connector {read_small.cpu_per_row_us(one)}")
        print(f"                       Spark alone {alone.cpu_per_row_us(alone_one)}")
        alo = bench_write(spark, bootstrap, "bench-alo", n, parts, "at_least_once")
        eos = bench_write(spark, bootstrap, "bench-eos", n, parts, "exactly_once")
        print(f"  write at_least_once: {alo:>10,.0f} rows/s")
        print(f"  write exactly_once : {eos:>10,.0f} rows/s   ({eos / alo:.2f} of at_least_once, "
              "target >= 0.85)")
        spark.stop()


if __name__ == "__main__":
    main()
