"""Records/s of a count-by-key topology on Spark local[2]: exactly_once_v2 vs at_least_once.

    python bench/spark_runtime.py [--records 200000] [--keys 1000] [--partitions 2]
                                  [--max-offsets-per-trigger 100000]

An embedded broker; one input topic pre-filled with ``--records`` records; for each guarantee a
fresh application (``stream → group_by_key → count → to``, RocksDB store with changelog) runs
until every input record is committed. Figures: processing time from the first micro-batch to
caught-up (Spark start-up and a warm-up run excluded; the query's own start-up, a few
seconds, included), records/s, task batches (and how many ran on a task kept open since its
previous batch), mean task time per batch, and the interactive query of the counts store once
caught up: the first ``store()`` (real-time mode: a view the stream threads answer, docs/runtime.md
#interactive-queries; micro-batch mode: restores the changelog into the driver's copy), a second
``store()``, a ``get`` on the view. A small ``--max-offsets-per-trigger`` makes many
micro-batches, so the fixed cost per task batch shows.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid

from strom.broker import EmbeddedBroker
from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.spark.runtime import SparkStreams
from strom.streams import (
    Consumed,
    Materialized,
    Produced,
    QueryableStoreTypes,
    Serdes,
    StoreQueryParameters,
    StreamsBuilder,
    Topology,
)

S, L = Serdes.String(), Serdes.Long()


def count_by_key(source: str, sink: str) -> Topology:
    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_(S, S)).group_by_key()
        .count(materialized=Materialized.as_("counts")).to_stream().to(sink, Produced.with_(S, L)))
    return builder.build()


def fill(bootstrap: str, topic: str, records: int, keys: int) -> None:
    producer = clients.producer(bootstrap, **JAVA_PARTITIONER, **{"linger.ms": 50})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, b"x" * 50, f"key-{i % keys}".encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def run(spark, bootstrap: str, source: str, guarantee: str, records: int,
        per_trigger: int) -> dict[str, float]:
    sink = f"bench-out-{uuid.uuid4().hex[:8]}"
    clients.create_topics(bootstrap, {sink: 2})
    app = SparkStreams(count_by_key(source, sink), {
        "application.id": f"bench-{guarantee}-{uuid.uuid4().hex[:8]}", "bootstrap.servers": bootstrap,
        "processing.guarantee": guarantee, "commit.interval.ms": 100,
        "max.offsets.per.trigger": per_trigger,
        "state.dir": tempfile.mkdtemp(prefix="strom-bench-")}, spark)
    app.start()
    started = time.monotonic()
    try:
        assert app.wait_until_caught_up(600), "not caught up in 600 s"
        elapsed = time.monotonic() - started
        query = query_times(app)
    finally:
        app.stop()
    tasks = app.progress.tasks.values()
    batches = sum(t.batches for t in tasks)
    return {"seconds": elapsed, "records_per_s": records / elapsed, "batches": batches,
            "reused": app.progress.reused,
            "task_ms_per_batch": sum(t.millis for t in tasks) / max(1, batches), **query}


def query_times(app: SparkStreams) -> dict[str, float]:
    """Milliseconds of the first query of the counts store, of a refresh, and of one get."""
    params = StoreQueryParameters.from_name("counts", QueryableStoreTypes.key_value_store())
    started = time.perf_counter()
    counts = app.store(params)
    first = time.perf_counter()
    app.store(params)
    refreshed = time.perf_counter()
    counts.get("key-1")
    done = time.perf_counter()
    return {"query_first_ms": (first - started) * 1000, "query_refresh_ms": (refreshed - first) * 1000,
            "query_get_ms": (done - refreshed) * 1000, "query_entries": sum(1 for _ in counts.all())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    args = parser.parse_args()
    import strom.spark

    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        source = f"bench-in-{uuid.uuid4().hex[:8]}"
        clients.create_topics(bootstrap, {source: args.partitions})
        fill(bootstrap, source, args.records, args.keys)
        spark = strom.spark.session(app_name="strom-bench-runtime", log_level="ERROR")
        print(f"count-by-key, {args.records} records, {args.keys} keys, {args.partitions} partitions, "
              f"local[2], commit.interval.ms=100, max.offsets.per.trigger={args.max_offsets_per_trigger}")
        warm_up = f"bench-warm-{uuid.uuid4().hex[:8]}"
        clients.create_topics(bootstrap, {warm_up: args.partitions})
        fill(bootstrap, warm_up, 1000, args.keys)
        # starts Spark's Python workers
        run(spark, bootstrap, warm_up, "exactly_once_v2", 1000, args.max_offsets_per_trigger)
        for guarantee in ("exactly_once_v2", "at_least_once"):
            figures = run(spark, bootstrap, source, guarantee, args.records, args.max_offsets_per_trigger)
            print(f"{guarantee:>16}: {figures['records_per_s']:>9,.0f} records/s  "
                  f"({figures['seconds']:.1f} s, {figures['batches']:.0f} task batches, "
                  f"{figures['reused']:.0f} on open tasks, "
                  f"{figures['task_ms_per_batch']:.0f} ms per task batch)")
            print(f"{'':>16}  query of counts: first {figures['query_first_ms']:.0f} ms "
                  f"({figures['query_entries']:.0f} keys), refresh {figures['query_refresh_ms']:.1f} ms, "
                  f"get {figures['query_get_ms']:.2f} ms")
        spark.stop()


if __name__ == "__main__":
    main()
