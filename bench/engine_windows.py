"""Windowed and join throughput on one core, no broker: records/s through one StreamTask.

Cases (10k distinct keys, string keys and values, record timestamps 1 ms apart):
  d  group_by_key().windowed_by(1-minute tumbling windows).count(), RocksDB and in-memory window store,
     and RocksDB with EmitStrategy.on_window_close() ("on close": one final result per window)
  e  stream-table join: each stream record looks up a 10k-key table (loaded first, not timed); and the
     same join with the table in a versioned store (a lookup as of each record's time; no cache)
with caching on and off. Records are fed raw to the task, which commits every --commit-every records,
as in bench/engine.py (whose feeding and sink this reuses).

    .venv/bin/python bench/engine_windows.py [--records 500000] [--keys 10000] [--commit-every 100000]
        [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial

from engine import CountingSink, interleaved, make_records, print_setup, run_case
from strom.kafka.serdes import Serdes
from strom.streams import (
    EmitStrategy,
    Materialized,
    Produced,
    Stores,
    StreamsBuilder,
    StreamsConfig,
)
from strom.streams.kstream.windowed_serdes import WindowedSerdes
from strom.streams.kstream.windows import TimeWindows
from strom.streams.processor import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.internals.task import StreamTask
from strom.streams.state.cache import ThreadCache
from strom.streams.state.window import builders

S, L = Serdes.String(), Serdes.Long()
MINUTE = timedelta(minutes=1)
UPDATES = EmitStrategy.on_window_update()


def windowed_count(store_factory, emit: EmitStrategy = UPDATES):
    def build(builder: StreamsBuilder, caching: bool) -> None:
        windows = TimeWindows.of_size_with_no_grace(MINUTE)
        materialized = Materialized.as_(store_factory("counts", windows.size_ms, windows.size_ms))
        if not caching:
            materialized = materialized.with_caching_disabled()
        key_serde = WindowedSerdes.time_windowed_serde_from(S, windows.size_ms)
        (builder.stream("in").group_by_key().windowed_by(windows).emit_strategy(emit)
         .count(materialized=materialized)
         .to_stream().to("out", Produced.with_(key_serde, L)))

    return build


def stream_table_join(materialized: Materialized) -> Callable[[StreamsBuilder], None]:
    def build(builder: StreamsBuilder) -> None:
        table = builder.table("table", materialized=materialized)
        builder.stream("in").join(table, lambda value, other: value + other).to("out")

    return build


def join_table(caching: bool) -> Materialized:
    return Materialized.as_("table") if caching else Materialized.as_("table").with_caching_disabled()


VERSIONED_TABLE = Materialized.as_(Stores.persistent_versioned_key_value_store("table", timedelta(hours=1)))


def run_join(build: Callable[[StreamsBuilder], None], records: list[ConsumerRecord], keys: int,
             commit_every: int, cache_bytes: int) -> float:
    state_dir = tempfile.mkdtemp(prefix="strom-bench-")
    try:
        builder = StreamsBuilder()
        build(builder)
        config = StreamsConfig({"application.id": "bench", "state.dir": state_dir,
                                "default.key.serde": "String", "default.value.serde": "String",
                                "statestore.cache.max.bytes": cache_bytes})
        task = StreamTask(TaskId(0, 0), builder.build().internal, config, CountingSink(),
                          ThreadCache(cache_bytes))
        task.initialize()
        task.complete_restoration()
        table = [ConsumerRecord("table", 0, i, 0, f"key-{i}".encode(), f"t{i}".encode()) for i in range(keys)]
        task.add_records(TopicPartition("table", 0), table)
        task.process_all()
        task.commit()
        gc.collect()
        best = float("inf")
        for start in range(0, len(records), commit_every):
            chunk = records[start:start + commit_every]
            started = time.process_time()
            task.add_records(TopicPartition("in", 0), chunk)
            task.process_all()
            task.commit()
            best = min(best, (time.process_time() - started) / len(chunk))
        task.close()
        return 1 / best
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


WINDOWED = {
    "d windowed count, RocksDB": windowed_count(builders.persistent_timestamped_window_store),
    "d windowed count, in-memory": windowed_count(builders.in_memory_timestamped_window_store),
    "d windowed count, on close": windowed_count(builders.persistent_timestamped_window_store,
                                                 EmitStrategy.on_window_close()),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--commit-every", type=int, default=100_000)
    parser.add_argument("--cache-bytes", type=int, default=10 * 1024 * 1024)
    parser.add_argument("--case", choices=["d", "e"], action="append")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    records = make_records(args.records, args.keys)
    print_setup(args)
    runs: dict[str, Callable[[], float]] = {}
    for caching in (True, False):
        state = "on " if caching else "off"
        if not args.case or "d" in args.case:
            for name, build in WINDOWED.items():
                runs[f"{name:<30} caching {state}"] = partial(
                    run_case, build, caching, records, args.commit_every, args.cache_bytes)
        if not args.case or "e" in args.case:
            runs[f"{'e stream-table join':<30} caching {state}"] = partial(
                run_join, stream_table_join(join_table(caching)), records, args.keys, args.commit_every,
                args.cache_bytes)
    if not args.case or "e" in args.case:  # a versioned store has no cache
        runs[f"{'e join, versioned table':<30} caching off"] = partial(
            run_join, stream_table_join(VERSIONED_TABLE), records, args.keys, args.commit_every,
            args.cache_bytes)
    interleaved(args.repeat, runs)

if __name__ == "__main__":
    main()
