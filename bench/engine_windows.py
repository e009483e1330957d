"""Windowed and join throughput on one core, no broker: records/s through one StreamTask.

Cases (10k distinct keys, string keys and values, record timestamps 1 ms apart):
  d  group_by_key().windowed_by(1-minute tumbling windows).count(), RocksDB and in-memory window store,
     and RocksDB with EmitStrategy.on_window_close() ("on close": one final result per window)
  e  stream-table join: each stream record looks up a 10k-key table (loaded first, not timed); and the
     same join with the table in a versioned store (a lookup as of each record's time; no cache)
with caching on and off. Records are fed raw to the task, which commits every --commit-every records,
each case in a subprocess, wall clock over the whole run, as in bench/engine.py (whose feeding, sink,
options and --baseline REV alternation this reuses).

    .venv/bin/python bench/engine_windows.py [--case d --case e] [--keys 10000] [--caching on off]
        [--records 500000] [--commit-every 100000] [--repeat 3] [--baseline main]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable
from datetime import timedelta

from alternate import report
from engine import chunks, open_task, parser_with, sweep, timed_run
from strom.kafka.serdes import Serdes
from strom.streams import (
    EmitStrategy,
    Materialized,
    Produced,
    Stores,
    StreamsBuilder,
)
from strom.streams.kstream.windowed_serdes import WindowedSerdes
from strom.streams.kstream.windows import TimeWindows
from strom.streams.processor import ConsumerRecord, TopicPartition
from strom.streams.processor.internals.task import StreamTask
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


def join_case(materialized: Materialized) -> Callable[[StreamsBuilder, bool], None]:
    """The join, its table loaded with --keys entries before the timed part."""
    return lambda builder, caching: stream_table_join(materialized)(builder)


def preload_table(task: StreamTask, keys: int) -> None:
    table = [ConsumerRecord("table", 0, i, 0, f"key-{i}".encode(), f"t{i}".encode()) for i in range(keys)]
    task.add_records(TopicPartition("table", 0), table)
    task.process_all()
    task.commit()


WINDOWED = {
    "d windowed count, RocksDB": windowed_count(builders.persistent_timestamped_window_store),
    "d windowed count, in-memory": windowed_count(builders.in_memory_timestamped_window_store),
    "d windowed count, on close": windowed_count(builders.persistent_timestamped_window_store,
                                                 EmitStrategy.on_window_close()),
}


CASES = {
    "d1": ("d windowed count, RocksDB", WINDOWED["d windowed count, RocksDB"]),
    "d2": ("d windowed count, in-memory", WINDOWED["d windowed count, in-memory"]),
    "d3": ("d windowed count, on close", WINDOWED["d windowed count, on close"]),
    "e1": ("e stream-table join", None),
    "e2": ("e join, versioned table", None),
}


def run_child(args: argparse.Namespace) -> None:
    caching = args.caching == ["on"]
    if args.run == "e1":
        build = join_case(join_table(caching))
    elif args.run == "e2":  # a versioned store has no cache
        build = join_case(VERSIONED_TABLE)
    else:
        build = CASES[args.run][1]
    state_dir = tempfile.mkdtemp(prefix="strom-bench-")
    try:
        task = open_task(lambda builder: build(builder, caching), state_dir, args.cache_bytes)
        if args.run.startswith("e"):
            preload_table(task, args.keys[0])
        report(*timed_run(task, chunks(args.records, args.keys[0], args.commit_every)))
        task.close()
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def main() -> None:
    parser = parser_with([*CASES, "d", "e"], __doc__)
    parser.set_defaults(keys=[10_000])
    args = parser.parse_args()
    if args.run:
        args.records = args.records or max(500_000, 2 * args.keys[0])
        run_child(args)
    else:
        if args.case:  # "d" and "e" select their group
            args.case = [code for code in CASES if any(code.startswith(c) for c in args.case)]
        sweep(__file__, args, CASES, uncached=frozenset({"e2"}))


if __name__ == "__main__":
    main()
