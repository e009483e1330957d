"""Engine throughput on one core, no broker: records/s through one StreamTask.

Cases (10k distinct keys, string keys and values):
  a  filter -> map_values -> to
  b  group_by_key().count(), in-memory store
  c  group_by_key().count(), RocksDB store
each with caching on and off. Records are fed as raw (serialized) consumer records, the way the Spark
runtime feeds a task; output goes to a sink that only counts. The task commits every --commit-every
records (flush caches, changelog, offsets), as a commit interval would. Each commit interval is timed
in CPU seconds of this process (time.process_time) and the best interval is kept, so other load
on the machine skews the figures less. The cases run in --repeat interleaved rounds; each case's best
run and median are printed (this machine's speed drifts by up to 2x for seconds at a time: one run
says little).

    .venv/bin/python bench/engine.py [--records 500000] [--keys 10000] [--commit-every 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial

from machine import describe
from strom.kafka.serdes import Serdes
from strom.streams import Materialized, Produced, Stores, StreamsBuilder, StreamsConfig
from strom.streams.processor import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.internals.task import StreamTask
from strom.streams.state.cache import ThreadCache

S, L = Serdes.String(), Serdes.Long()


class CountingSink:
    def __init__(self) -> None:
        self.records = 0
        self.offsets: dict[tuple[str, int], int] = {}

    def send(self, collector, topic, partition, key, value, timestamp, headers) -> None:
        self.records += 1
        if partition is not None:  # changelog records: remember offsets for the checkpoint
            offset = self.offsets.get((topic, partition), -1) + 1
            self.offsets[(topic, partition)] = offset
            collector.delivered(topic, partition, offset)

    def flush(self, collector) -> None:
        pass


def stateless(builder: StreamsBuilder, caching: bool) -> None:
    (builder.stream("in").filter(lambda k, v: not v.endswith("7")).map_values(str.upper).to("out"))


def count(supplier_factory):
    def build(builder: StreamsBuilder, caching: bool) -> None:
        materialized = Materialized.as_(supplier_factory("counts"))
        if not caching:
            materialized = materialized.with_caching_disabled()
        builder.stream("in").group_by_key().count(materialized=materialized).to_stream().to(
            "out", Produced.with_(S, L)
        )

    return build


CASES = {
    "a filter->map_values->to": stateless,
    "b count, in-memory": count(Stores.in_memory_key_value_store),
    "c count, RocksDB": count(Stores.persistent_key_value_store),
}


def make_records(n: int, keys: int) -> list[ConsumerRecord]:
    key_bytes = [f"key-{i}".encode() for i in range(keys)]
    return [
        ConsumerRecord("in", 0, i, i, key_bytes[(i * 7919) % keys], f"value-{i}".encode()) for i in range(n)
    ]


def run_case(
    build, caching: bool, records: list[ConsumerRecord], commit_every: int, cache_bytes: int
) -> float:
    state_dir = tempfile.mkdtemp(prefix="strom-bench-")
    try:
        builder = StreamsBuilder()
        build(builder, caching)
        config = StreamsConfig(
            {
                "application.id": "bench",
                "state.dir": state_dir,
                "default.key.serde": "String",
                "default.value.serde": "String",
                "statestore.cache.max.bytes": cache_bytes,
            }
        )
        sink = CountingSink()
        task = StreamTask(TaskId(0, 0), builder.build().internal, config, sink, ThreadCache(cache_bytes))
        task.initialize()
        task.complete_restoration()
        partition = TopicPartition("in", 0)
        gc.collect()
        best = float("inf")
        for start in range(0, len(records), commit_every):
            chunk = records[start : start + commit_every]
            started = time.process_time()
            task.add_records(partition, chunk)
            task.process_all()
            task.commit()
            best = min(best, (time.process_time() - started) / len(chunk))
        task.close()
        return 1 / best
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def print_setup(args: argparse.Namespace) -> None:
    print(describe())
    print(f"{args.records} records, {args.keys} keys, commit every {args.commit_every}, "
          f"cache {args.cache_bytes} bytes")


def interleaved(repeat: int, runs: dict[str, Callable[[], float]]) -> None:
    """Runs every case once per round for ``repeat`` rounds, then prints each case's best and median
    records/s: a slow spell of this machine (its speed drifts up to 2x for seconds at a time) costs
    each case one run, not all the runs of one case."""
    rates: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(repeat):
        for label, run in runs.items():
            rates[label].append(run())
    for label, values in rates.items():
        print(f"  {label}  {max(values):>10,.0f} records/s best, "
              f"{statistics.median(values):>10,.0f} median of {repeat}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--commit-every", type=int, default=100_000)
    parser.add_argument("--cache-bytes", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--case", choices=["a", "b", "c"], action="append")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    records = make_records(args.records, args.keys)
    print_setup(args)
    runs = {
        f"{name:<28} caching {'on ' if caching else 'off'}": partial(
            run_case, build, caching, records, args.commit_every, args.cache_bytes
        )
        for name, build in CASES.items()
        if not args.case or name[0] in args.case
        for caching in (True, False)
    }
    interleaved(args.repeat, runs)


if __name__ == "__main__":
    main()
