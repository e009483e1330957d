"""State-store throughput: a count-by-key read-modify-write (get + put) per record, one core.

Prints records/s for in-memory and RocksDB stores with caching on and off, through all layers
(metered -> caching -> change-logging -> transactional buffer -> inner), committing every
``commit_every`` records (default 100k: at 250k records/s that is a 0.4 s commit interval).

    .venv/bin/python bench/state.py [records] [distinct keys] [commit_every]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from strom.kafka.serdes import Serdes
from strom.streams.state import (
    ProcessorStateManager,
    RecordContext,
    Stores,
    ThreadCache,
    changelog_topic_name,
)


class BenchContext:
    """The part of a processor context stores use; changelog records only count their offsets."""

    def __init__(self, state_dir: Path) -> None:
        self.application_id, self.task_id, self.partition = "bench", "0_0", 0
        self.state_dir = state_dir
        self.key_serde, self.value_serde = Serdes.String(), Serdes.Long()
        self.cache = ThreadCache()
        self.record_context = RecordContext(0, "input", 0, 0)
        self.changelog_end: dict[str, int] = {}
        self.manager = ProcessorStateManager("0_0", 0, state_dir, self.changelog_topic, self.cache)

    def set_record_context(self, record_context: RecordContext) -> None:
        self.record_context = record_context

    def changelog_topic(self, store_name: str) -> str:
        return changelog_topic_name(self.application_id, store_name)

    def log_change(self, store_name: str, key: bytes, value: bytes | None, timestamp: int,
                   headers: Any) -> None:
        self.changelog_end[store_name] = self.changelog_end.get(store_name, 0) + 1

    def register_store(self, store: Any, transaction: Any, logged: bool) -> None:
        self.manager.register_store(store, transaction, logged)

    def commit(self) -> None:
        self.manager.flush()
        self.manager.commit(dict(self.changelog_end))


def run(supplier: Any, caching: bool, records: int, keys: int, commit_every: int) -> tuple[float, float]:
    """Records per wall-clock second and per CPU second (the latter is steadier on a busy machine)."""
    with tempfile.TemporaryDirectory() as tmp:
        context = BenchContext(Path(tmp))
        builder = Stores.key_value_store_builder(supplier, Serdes.String(), Serdes.Long())
        store = (builder.with_caching_enabled() if caching else builder).build()
        store.init(context, store)
        if caching:
            store.set_flush_listener(lambda key, new, old, timestamp: None, False)
        names = [f"key-{i % keys}" for i in range(records)]
        started, cpu_started = time.perf_counter(), time.process_time()
        for i, name in enumerate(names):
            count = store.get(name)
            store.put(name, 1 if count is None else count + 1)
            if i % commit_every == commit_every - 1:
                context.commit()
        context.commit()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        context.manager.close()
        return records / elapsed, records / cpu


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    keys = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    commit_every = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
    print(f"count-by-key get+put, {records} records, {keys} keys, commit every {commit_every}")
    for label, supplier in (("in-memory", Stores.in_memory_key_value_store),
                            ("rocksdb", Stores.persistent_key_value_store)):
        for caching in (True, False):
            wall, cpu = run(supplier("counts"), caching, records, keys, commit_every)
            print(f"  {label:9s} caching={'on ' if caching else 'off'}  {wall:>10,.0f} records/s  "
                  f"({cpu:,.0f} per CPU second)")


if __name__ == "__main__":
    main()
