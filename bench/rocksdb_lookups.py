"""A count's RocksDB traffic without the engine: ``RocksDBStore``'s reads and commits alone.

Per record one ``get`` of its key (absent the first time a key comes, present afterwards), then per
commit interval one ``write_batch`` of every key of the interval (16-byte values, a count's timestamp
and long) from a dict, as the transaction buffer commits: what the count of bench/engine.py case c
asks of RocksDB behind a record cache that holds a small share of the keys. The store is
``strom.streams.state.rocksdb.RocksDBStore`` of the code under test (its options, its write path), so
``--baseline REV`` compares REV's store with this tree's, alternating run by run (bench/alternate.py).
Printed per key count: wall-clock records/s over the whole run, records per CPU second over the whole
run (all threads: compactions count), peak RSS.
``--detail`` runs once in this process and prints the median (over commit intervals) time of a get of
an absent key, of a present key and of a write per key, then RocksDB's levels and memory at the end.

    .venv/bin/python bench/rocksdb_lookups.py [--keys 1000000 5000000] [--repeat 3] [--baseline main]
    .venv/bin/python bench/rocksdb_lookups.py --keys 5000000 --detail
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from types import SimpleNamespace

from alternate import add_arguments, alternate, peak_rss_mb, report
from machine import describe
from strom.streams.state.rocksdb import RocksDBStore

VALUE = bytes(16)


def intervals(records: int, keys: int, size: int) -> Iterator[list[bytes]]:
    """The keys of bench/engine.py's input, one list per commit interval."""
    step = 7919 if keys % 7919 else 7907
    for start in range(0, records, size):
        yield [b"key-%d" % ((i * step) % keys) for i in range(start, min(records, start + size))]


def run(keys: int, records: int, commit_every: int, detail: bool) -> tuple[float, float]:
    """(wall-clock records/s, records per CPU second) of the get-then-write-batch loop."""
    directory = tempfile.mkdtemp(prefix="strom-rocksdb-bench-")
    store = RocksDBStore("bench")
    store.init(SimpleNamespace(state_dir=directory), store)
    try:
        get, wall, cpu, seen = store.get, 0.0, 0.0, 0
        micros: dict[str, list[float]] = {"get absent": [], "get present": [], "write": []}
        for interval in intervals(records, keys, commit_every):
            buffered = dict.fromkeys(interval, VALUE)  # the transaction buffer the commit writes
            started, cpu_started = time.perf_counter(), time.process_time()
            for key in interval:
                get(key)
            read = time.perf_counter()
            store.write_batch(buffered.items(), seen + len(interval))
            wall += time.perf_counter() - started
            cpu += time.process_time() - cpu_started
            micros["get absent" if seen < keys else "get present"].append((read - started) / len(interval))
            micros["write"].append((time.perf_counter() - read) / len(interval))
            seen += len(interval)
        if detail:
            db = store._live()
            print(", ".join(f"{kind} {statistics.median(times) * 1e6:.2f} us"
                            for kind, times in micros.items() if times))
            print(db.property_value("rocksdb.levelstats"))
            for name in ("block-cache-usage", "estimate-table-readers-mem", "cur-size-all-mem-tables",
                         "total-sst-files-size"):
                print(f"{name}: {int(db.property_value(f'rocksdb.{name}')) / 2**20:.1f} MiB")
        return seen / wall, seen / cpu
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--records", type=int, help="default: 2 x keys")
    parser.add_argument("--commit-every", type=int, default=100_000)
    parser.add_argument("--detail", action="store_true")
    add_arguments(parser)
    args = parser.parse_args()
    if args.run or args.detail:
        keys = args.keys[0]
        wall, cpu = run(keys, args.records or 2 * keys, args.commit_every, args.detail)
        if args.detail:
            print(f"wall {wall:,.0f} records/s, {cpu:,.0f} per CPU second, peak RSS {peak_rss_mb():.0f} MB")
        else:
            report(wall, cpu)
        return
    print(describe())
    print(f"get per record, one write batch per {args.commit_every} records, {args.repeat} rounds; "
          "'cpu best' here is the whole run's records per CPU second")
    runs = {f"rocksdb get + batch put, {keys // 1000}k keys":
            ["--run", "bare", "--keys", str(keys), "--records", str(args.records or 2 * keys),
             "--commit-every", str(args.commit_every)] for keys in args.keys}
    alternate(__file__, runs, args.repeat, args.baseline)


if __name__ == "__main__":
    main()
