"""Engine throughput on one core, no broker: records/s through one StreamTask.

Cases (string keys and values; --keys distinct keys, default a sweep of 10k, 1M and 5M):
  a  filter -> map_values -> to
  b  group_by_key().count(), in-memory store
  c  group_by_key().count(), RocksDB store
each with caching on and off (--caching). Records are fed as raw (serialized) consumer records, the
way the runtime feeds a task, in chunks of --commit-every made outside the timed part (so even 5M keys
keep only one chunk of input in memory); output goes to a sink that only counts. The task commits after
every chunk (flush caches, changelog, offsets), as a commit interval would.

Every case runs in a fresh subprocess (bench/alternate.py), so its peak RSS is its own. Printed per
case: records/s in wall-clock time over the whole run (median and best of --repeat rounds), the best
commit interval in CPU seconds (the old single figure, steadier on a busy machine), peak RSS. With
--baseline REV every case also runs on REV's code, alternating with this tree's, and the ratio of the
wall-clock medians is printed. --records defaults to max(500k, 2 x keys): at 1M and 5M keys half the
reads then find the key in the store and the cache (10 MiB) holds a small share of them.

    .venv/bin/python bench/engine.py [--keys 10000 1000000] [--case a --case b] [--caching on]
        [--records N] [--commit-every 100000] [--repeat 3] [--baseline main]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator

from alternate import add_arguments, alternate, report
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
    "a": ("a filter->map_values->to", stateless),
    "b": ("b count, in-memory", count(Stores.in_memory_key_value_store)),
    "c": ("c count, RocksDB", count(Stores.persistent_key_value_store)),
}


def chunks(n: int, keys: int, size: int, topic: str = "in") -> Iterator[list[ConsumerRecord]]:
    """The input in chunks of ``size``, keys spread over ``keys`` (every key once per ``keys`` records)."""
    step = 7919 if keys % 7919 else 7907
    for start in range(0, n, size):
        yield [ConsumerRecord(topic, 0, i, i, b"key-%d" % ((i * step) % keys), b"value-%d" % i)
               for i in range(start, min(n, start + size))]


def make_records(n: int, keys: int) -> list[ConsumerRecord]:
    return [record for chunk in chunks(n, keys, n or 1) for record in chunk]


def open_task(build: Callable[[StreamsBuilder], None], state_dir: str, cache_bytes: int) -> StreamTask:
    builder = StreamsBuilder()
    build(builder)
    config = StreamsConfig({"application.id": "bench", "state.dir": state_dir,
                            "default.key.serde": "String", "default.value.serde": "String",
                            "statestore.cache.max.bytes": cache_bytes})
    task = StreamTask(TaskId(0, 0), builder.build().internal, config, CountingSink(),
                      ThreadCache(cache_bytes))
    task.initialize()
    task.complete_restoration()
    return task


def timed_run(task: StreamTask, inputs: Iterator[list[ConsumerRecord]]) -> tuple[float, float]:
    """(wall-clock records/s over all chunks, best chunk's records per CPU second); each chunk is
    added, processed and committed."""
    partition = TopicPartition("in", 0)
    gc.collect()
    wall = 0.0
    records = 0
    best = float("inf")
    for chunk in inputs:
        started, cpu_started = time.perf_counter(), time.process_time()
        task.add_records(partition, chunk)
        task.process_all()
        task.commit()
        wall += time.perf_counter() - started
        best = min(best, (time.process_time() - cpu_started) / len(chunk))
        records += len(chunk)
    return records / wall, 1 / best


def run_case(build, caching: bool, records: list[ConsumerRecord], commit_every: int,
             cache_bytes: int) -> float:
    """One run in this process over ``records``: the best commit interval's records per CPU second."""
    state_dir = tempfile.mkdtemp(prefix="strom-bench-")
    try:
        task = open_task(lambda builder: build(builder, caching), state_dir, cache_bytes)
        inputs = (records[i:i + commit_every] for i in range(0, len(records), commit_every))
        _, cpu = timed_run(task, inputs)
        task.close()
        return cpu
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def run_child(args: argparse.Namespace) -> None:
    _, build = CASES[args.run]
    caching = args.caching == ["on"]
    state_dir = tempfile.mkdtemp(prefix="strom-bench-")
    try:
        task = open_task(lambda builder: build(builder, caching), state_dir, args.cache_bytes)
        report(*timed_run(task, chunks(args.records, args.keys[0], args.commit_every)))
        task.close()
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def parser_with(cases: Iterable[str], doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000_000, 5_000_000])
    parser.add_argument("--records", type=int, help="default: max(500000, 2 x keys)")
    parser.add_argument("--commit-every", type=int, default=100_000)
    parser.add_argument("--cache-bytes", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--case", choices=list(cases), action="append")
    parser.add_argument("--caching", choices=["on", "off"], nargs="+", default=["on", "off"])
    add_arguments(parser)
    return parser


def child_argv(args: argparse.Namespace, case: str, keys: int, caching: str) -> list[str]:
    records = args.records or max(500_000, 2 * keys)
    return ["--run", case, "--keys", str(keys), "--records", str(records), "--caching", caching,
            "--commit-every", str(args.commit_every), "--cache-bytes", str(args.cache_bytes)]


def sweep(script: str, args: argparse.Namespace, cases: dict[str, tuple[str, object]],
          uncached: frozenset[str] = frozenset()) -> None:
    """Every selected case at every key count and caching setting (``uncached`` cases: off only)."""
    print(describe())
    print(f"commit every {args.commit_every}, cache {args.cache_bytes} bytes, records "
          f"{args.records or 'max(500k, 2 x keys)'}, wall clock over the whole run, {args.repeat} rounds")
    runs = {
        f"{label} {keys // 1000}k keys, cache {caching}": child_argv(args, code, keys, caching)
        for keys in args.keys for code, (label, _) in cases.items()
        if not args.case or code in args.case
        for caching in args.caching
        if caching == "off" or code not in uncached
    }
    alternate(script, runs, args.repeat, args.baseline)


def main() -> None:
    args = parser_with("abc", __doc__).parse_args()
    if args.run:
        args.records = args.records or max(500_000, 2 * args.keys[0])
        run_child(args)
    else:
        sweep(__file__, args, CASES)


if __name__ == "__main__":
    main()
