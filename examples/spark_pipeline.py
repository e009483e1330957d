"""End to end: a Spark SQL streaming pipeline over topics of strom's embedded broker.

1. start an embedded broker and produce page-view events to ``page-views``;
2. a streaming query reads them through the "strom" source, counts views and distinct users per
   page with Spark SQL, and writes the running totals exactly-once to ``page-stats``;
3. read ``page-stats`` back (read_committed) and print the final totals per page.

Run: ``python examples/spark_pipeline.py`` (needs Java 17+; about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter

from pyspark.sql import functions as F

import strom.spark
from strom.broker import EmbeddedBroker
from strom.kafka import clients
from strom.spark.connector.progress import offsets_behind_latest

PAGES = ("/home", "/docs", "/pricing", "/blog", "/signup")
EVENTS_SCHEMA = "user string, page string, ms long"


def produce_events(bootstrap: str, topic: str, count: int) -> Counter:
    """Writes ``count`` page views keyed by user; returns the true views per page."""
    rng = random.Random(42)
    producer = clients.producer(bootstrap)
    views: Counter = Counter()
    for i in range(count):
        user, page = f"user-{rng.randrange(200)}", rng.choice(PAGES)
        event = {"user": user, "page": page, "ms": 1_700_000_000_000 + i}
        producer.produce(topic, json.dumps(event).encode(), user.encode())
        producer.poll(0)
        views[page] += 1
    producer.flush(30)
    return views


def run_pipeline(spark, bootstrap: str, source: str, sink: str, guarantee: str, checkpoint: str):
    events = (spark.readStream.format("strom")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "2000")
              .load()
              .select(F.from_json(F.col("value").cast("string"), EVENTS_SCHEMA).alias("e"))
              .select("e.*"))
    stats = events.groupBy("page").agg(F.count("*").alias("views"),
                                       F.approx_count_distinct("user").alias("users"))
    query = (stats.select(F.col("page").alias("key"), F.to_json(F.struct("page", "views", "users"))
                          .alias("value"))
             .writeStream.format("strom")
             .outputMode("complete")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("topic", sink)
             .option("delivery.guarantee", guarantee)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()
    return query


def read_totals(spark, bootstrap: str, sink: str) -> dict[str, list[dict]]:
    """Every update written per page, in offset order (read_committed, the default)."""
    rows = (spark.read.format("strom")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", sink)
            .load()
            .orderBy("partition", "offset")
            .collect())
    updates: dict[str, list[dict]] = {}
    for row in rows:
        updates.setdefault(row.key.decode(), []).append(json.loads(row.value))
    return updates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--delivery-guarantee", choices=("exactly_once", "at_least_once"),
                        default="exactly_once")
    args = parser.parse_args()

    started = time.monotonic()
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as checkpoint:
        bootstrap = broker.bootstrap_servers
        clients.create_topics(bootstrap, {"page-views": 2, "page-stats": 2})
        truth = produce_events(bootstrap, "page-views", args.events)
        print(f"broker at {bootstrap}: produced {args.events} page views to 'page-views'")

        spark = strom.spark.session(app_name="strom-demo", log_level="ERROR")
        query = run_pipeline(spark, bootstrap, "page-views", "page-stats", args.delivery_guarantee,
                             checkpoint)
        batches = [p for p in query.recentProgress if p.numInputRows]
        for progress in batches:
            lag = offsets_behind_latest(progress.sources[0]) or {}
            print(f"  batch {progress.batchId}: {progress.numInputRows} rows, "
                  f"{lag.get('maxOffsetsBehindLatest', 0):.0f} offsets behind latest afterwards")

        updates = read_totals(spark, bootstrap, "page-stats")
        spark.stop()

    print(f"\n'page-stats' ({args.delivery_guarantee}, read_committed): final totals per page")
    print(f"  {'page':<10}{'views':>8}{'users':>8}{'updates':>9}")
    problems = []
    for page in sorted(updates):
        history, final = updates[page], updates[page][-1]
        print(f"  {page:<10}{final['views']:>8}{final['users']:>8}{len(history):>9}")
        views = [u["views"] for u in history]
        if views != sorted(set(views)):
            problems.append(f"{page}: an update was written twice ({views})")
        if final["views"] != truth[page]:
            problems.append(f"{page}: {final['views']} views counted, {truth[page]} produced")
    if set(updates) != set(truth):
        problems.append(f"pages {sorted(set(truth) - set(updates))} are missing")
    print(f"\n{sum(truth.values())} events in {len(batches)} micro-batches, "
          f"{time.monotonic() - started:.0f}s end to end")
    if problems:
        print("MISMATCH:\n  " + "\n  ".join(problems))
        return 1
    print("every page's total matches the events produced; no update written twice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
