"""Throughput of the "strom" Spark connector on local[2] against the embedded broker.

Prints rows/s for batch reads of 100 B and 1 KB values, and for batch writes with
delivery.guarantee at_least_once and exactly_once (targets: read >= 300k rows/s of 100 B values;
exactly-once write >= 0.85 of at-least-once).

    python bench/spark_connector.py [--records 500000] [--partitions 2]
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import functions as F

import strom.spark
from strom.broker import EmbeddedBroker
from strom.kafka import clients


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


def bench_read(spark, bootstrap: str, topic: str, records: int) -> float:
    df = (spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).load())
    started = time.perf_counter()
    [row] = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()
    seconds = time.perf_counter() - started
    assert row.n == records, (row.n, records)
    return records / seconds


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
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    n, parts = args.records, args.partitions

    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        topics = {"bench-100b": parts, "bench-1kb": parts, "bench-warmup": parts,
                  "bench-alo": parts, "bench-eos": parts}
        clients.create_topics(bootstrap, topics)
        fill(bootstrap, "bench-100b", n, 100)
        fill(bootstrap, "bench-1kb", n, 1000)
        spark = strom.spark.session(app_name="strom-bench", log_level="ERROR")
        # Warm-up: Python workers, JIT and code generation, so the figures measure steady state.
        # A full-size pass: the first large write and read are much slower than the ones after.
        bench_write(spark, bootstrap, "bench-warmup", n, parts, "at_least_once")
        bench_read(spark, bootstrap, "bench-warmup", n)

        print(f"strom Spark connector, local[2], {n} records, {parts} partitions")
        read_small = bench_read(spark, bootstrap, "bench-100b", n)
        print(f"  read  100 B values : {read_small:>10,.0f} rows/s   (target >= 300,000)")
        print(f"  read  1 KB values  : {bench_read(spark, bootstrap, 'bench-1kb', n):>10,.0f} rows/s")
        alo = bench_write(spark, bootstrap, "bench-alo", n, parts, "at_least_once")
        eos = bench_write(spark, bootstrap, "bench-eos", n, parts, "exactly_once")
        print(f"  write at_least_once: {alo:>10,.0f} rows/s")
        print(f"  write exactly_once : {eos:>10,.0f} rows/s   ({eos / alo:.2f} of at_least_once, "
              "target >= 0.85)")
        spark.stop()


if __name__ == "__main__":
    main()
