"""State-store throughput, one core.

Default: a count-by-key read-modify-write (get + put) per record. Prints records/s for in-memory and
RocksDB stores with caching on and off, through all layers (metered -> caching -> change-logging ->
transactional buffer -> inner), committing every ``commit_every`` records (default 100k: at 250k
records/s that is a 0.4 s commit interval).

    .venv/bin/python bench/state.py [records] [distinct keys] [commit_every]

``--restore``: restore of a changelog (default 1.2M records over 1M keys, 100-byte values, written
once to an embedded broker) into a RocksDB and an in-memory store the way a task restores (the
runtime's restore loop, a consumer from ``strom.kafka.clients``), into the driver's copies for
interactive queries (``StoreCopies``) and into a global table over the same topic, beside a bare
confluent-kafka consumer reading the same changelog (touching each key and value), each run in a
fresh subprocess, alternating, with --baseline REV also on REV's code (bench/alternate.py). Prints
records/s and each case as a fraction of the bare consumer on the same code.

    .venv/bin/python bench/state.py --restore [--restore-records 1200000] [--restore-keys 1000000]
        [--repeat 3] [--baseline main]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from alternate import add_arguments, alternate, report
from machine import describe
from strom.broker import EmbeddedBroker
from strom.kafka import clients
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


CHANGELOG = "bench-counts-changelog"
VALUE = b"v" * 100


def write_changelog(bootstrap: str, records: int, keys: int) -> None:
    clients.create_topics(bootstrap, {CHANGELOG: 1})
    producer = clients.producer(bootstrap, **{"linger.ms": 50, "batch.size": 1_000_000})
    for i in range(records):
        clients.produce(producer, CHANGELOG, VALUE, b"key-%d" % (i % keys), partition=0)
        if i % 100_000 == 0:
            producer.poll(0)
    producer.flush()


def bare_read(bootstrap: str) -> int:
    """What a consumer alone costs: the floor a restore is compared with. It takes what is fetched at
    once and waits only when nothing is (a ``consume`` with a timeout waits for a full batch: at the
    end of the log that is the whole timeout)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-bare",
                         "enable.partition.eof": True, "fetch.queue.backoff.ms": 10,
                         "fetch.wait.max.ms": 10, "enable.auto.commit": False})
    consumer.assign([TopicPartition(CHANGELOG, 0, OFFSET_BEGINNING)])
    read = 0
    try:
        while True:
            messages = consumer.consume(10_000, 0) or [m for m in [consumer.poll(1.0)] if m is not None]
            for message in messages:
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        return read
                    raise RuntimeError(message.error().str())
                message.key(), message.value(), message.offset(), message.timestamp()
                read += 1
    finally:
        consumer.close()


def restore_into(bootstrap: str, persistent: bool) -> int:
    """A task with one logged count store, restored from the changelog as the runtime restores it."""
    from engine import open_task  # the task as bench/engine.py builds it
    from strom.spark.runtime.restore import restore_task
    from strom.streams import Materialized, StreamsBuilder

    supplier = (Stores.persistent_key_value_store if persistent else Stores.in_memory_key_value_store)

    def build(builder: StreamsBuilder) -> None:
        builder.stream("in").group_by_key().count(materialized=Materialized.as_(supplier("counts")))

    with tempfile.TemporaryDirectory() as state_dir:
        task = open_task(build, state_dir, 10 * 1024 * 1024)
        consumer = clients.consumer(bootstrap, **{"enable.partition.eof": True, "fetch.wait.max.ms": 10})
        try:
            return restore_task(task, consumer)
        finally:
            consumer.close()
            task.close()


def copy_into(bootstrap: str, persistent: bool, global_store: bool, keys: int) -> tuple[float, float]:
    """What an interactive query on Spark restores first: the driver's copy of the task's store
    (``StoreCopies``, its own consumer), or of a global table over the same topic. Returns the wall
    and CPU seconds of the restore; checks afterwards that the copy holds every key."""
    from strom.spark.runtime.plan import ApplicationPlan, SubtopologyTasks
    from strom.spark.runtime.store_copies import StoreCopies
    from strom.streams import Materialized, QueryableStoreTypes, StoreQueryParameters, StreamsBuilder
    from strom.streams.config import StreamsConfig

    supplier = (Stores.persistent_key_value_store if persistent else Stores.in_memory_key_value_store)
    builder = StreamsBuilder()  # string values, so the check below can read them
    builder.stream("in").group_by_key().reduce(lambda _, new: new, Materialized.as_(supplier("counts")))
    builder.global_table(CHANGELOG, materialized=Materialized.as_(supplier("global")))
    with tempfile.TemporaryDirectory() as state_dir:
        config = StreamsConfig({"application.id": "bench", "bootstrap.servers": bootstrap,
                                "state.dir": state_dir, "processing.guarantee": "exactly_once_v2",
                                "default.key.serde": "String", "default.value.serde": "String"})
        plan = ApplicationPlan((SubtopologyTasks(0, {"in": 1}, 1, (CHANGELOG,)),), ())
        copies = StoreCopies(builder.build(), config, plan)
        try:
            started, cpu_started = time.perf_counter(), time.process_time()
            store = copies.store(StoreQueryParameters.from_name(
                "global" if global_store else "counts", QueryableStoreTypes.timestamped_key_value_store()))
            elapsed = time.perf_counter() - started, time.process_time() - cpu_started
            held = sum(1 for _ in store.all())
            if held != keys:
                raise RuntimeError(f"the copy holds {held} keys, not {keys}")
            return elapsed
        finally:
            copies.close()


def restore_child(kind: str, bootstrap: str, records: int, keys: int) -> None:
    if kind.startswith(("copy-", "global-")):
        wall, cpu = copy_into(bootstrap, kind.endswith("rocksdb"), kind.startswith("global-"), keys)
        report(records / wall, records / cpu)
        return
    started, cpu_started = time.perf_counter(), time.process_time()
    read = bare_read(bootstrap) if kind == "bare" else restore_into(bootstrap, kind == "rocksdb")
    report(read / (time.perf_counter() - started), read / (time.process_time() - cpu_started))


def restore_main(args: argparse.Namespace) -> None:
    print(describe())
    print(f"restore of {args.restore_records} changelog records, {args.restore_keys} keys, "
          f"{len(VALUE)}-byte values; {args.repeat} rounds")
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        write_changelog(bootstrap, args.restore_records, args.restore_keys)
        kinds = {"bare consumer": "bare", "restore, RocksDB": "rocksdb", "restore, in-memory": "memory",
                 "query copy, RocksDB": "copy-rocksdb", "query copy, in-memory": "copy-memory",
                 "global store, RocksDB": "global-rocksdb", "global store, in-memory": "global-memory"}
        sizes = ["--restore-records", str(args.restore_records), "--restore-keys", str(args.restore_keys)]
        cases = {label: ["--run", kind, "--bootstrap", bootstrap, *sizes] for label, kind in kinds.items()}
        alternate(__file__, cases, args.repeat, args.baseline, reference="bare consumer")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", type=int, nargs="?", default=200_000)
    parser.add_argument("keys", type=int, nargs="?", default=10_000)
    parser.add_argument("commit_every", type=int, nargs="?", default=100_000)
    parser.add_argument("--restore", action="store_true")
    parser.add_argument("--restore-records", type=int, default=1_200_000)
    parser.add_argument("--restore-keys", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args()
    if args.run:
        restore_child(args.run, args.bootstrap, args.restore_records, args.restore_keys)
        return
    if args.restore:
        restore_main(args)
        return
    records, keys, commit_every = args.records, args.keys, args.commit_every
    print(f"count-by-key get+put, {records} records, {keys} keys, commit every {commit_every}")
    for label, supplier in (("in-memory", Stores.in_memory_key_value_store),
                            ("rocksdb", Stores.persistent_key_value_store)):
        for caching in (True, False):
            wall, cpu = run(supplier("counts"), caching, records, keys, commit_every)
            print(f"  {label:9s} caching={'on ' if caching else 'off'}  {wall:>10,.0f} records/s  "
                  f"({cpu:,.0f} per CPU second)")


if __name__ == "__main__":
    main()
