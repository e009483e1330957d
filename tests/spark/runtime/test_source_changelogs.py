"""Stores whose changelog is a source topic, on the broker and on Spark: a source KTable under
``topology.optimization=all`` and a read-only state store (KIP-813). No changelog topic is created; a
task restores such a store from its source topic up to its committed offset (not the topic's end);
after a restart into an empty state directory the results and interactive queries are those of the
unoptimized topology."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.kafka.reading import end_consumer
from strom.spark.runtime import SparkStreams
from strom.spark.runtime.producer_sink import ProducerSink
from strom.spark.runtime.restore import restore_task
from strom.streams import (
    Consumed,
    Materialized,
    Produced,
    QueryableStoreTypes,
    StoreQueryParameters,
    StreamsBuilder,
    StreamsConfig,
    Topology,
    TopologyTestDriver,
)
from strom.streams.processor import ConsumerRecord, Processor, Record, TaskId, TopicPartition
from strom.streams.processor.internals.task import StreamTask
from strom.streams.state import Stores
from strom.streams.state.cache import ThreadCache
from strom.streams.state.manager import read_checkpoint
from support.kafka import Record as Produce
from support.kafka import produce

from .conftest import read_updates, run_until_caught_up
from .wordcount import S

pytestmark = [pytest.mark.broker]

KV = QueryableStoreTypes.key_value_store()
FRUITS = [f"fruit{i}" for i in range(8)]


def priced_orders(prices: str, orders: str, out: str, optimization: str = "all") -> Topology:
    """Orders joined with the latest price of their fruit, a source KTable."""
    builder = StreamsBuilder()
    table = builder.table(prices, Consumed.with_(S, S), Materialized.as_("prices"))
    (builder.stream(orders, Consumed.with_(S, S))
        .join(table, lambda quantity, price: f"{quantity}@{price}")
        .to(out, Produced.with_(S, S)))
    return builder.build({"application.id": "priced-orders", "topology.optimization": optimization})


def read_only_priced_orders(prices: str, orders: str, out: str) -> Topology:
    """The same results with the Processor API: a read-only state store filled from ``prices``.
    (Processors are defined here so Spark's workers get them by value: this module is not importable
    there.)"""

    class PriceUpdater(Processor):
        def init(self, context):
            self.store = context.get_state_store("prices")

        def process(self, record: Record) -> None:
            self.store.put(record.key, record.value)

    class PriceLookup(Processor):
        def init(self, context):
            self.context = context
            self.store = context.get_state_store("prices")

        def process(self, record: Record) -> None:
            price = self.store.get(record.key)
            if price is not None:
                self.context.forward(record.with_value(f"{record.value}@{price}"))

    topology = Topology()
    store = Stores.key_value_store_builder(Stores.persistent_key_value_store("prices"), S, S)
    topology.add_read_only_state_store(store, "prices-source", None, S.deserializer(), S, prices,
                                       "prices-updater", PriceUpdater)
    topology.add_source("orders-source", orders, key_serde=S, value_serde=S)
    topology.add_processor("lookup", PriceLookup, "orders-source")
    topology.connect_processor_and_state_stores("lookup", "prices")
    topology.add_sink("out", out, "lookup", key_serde=S, value_serde=S)
    return topology


def _produce(bootstrap: str, topic: str, records: list[tuple[str, str, int]]) -> None:
    produce(bootstrap, topic, [Produce(k, v, timestamp=ts) for k, v, ts in records], **JAVA_PARTITIONER)


def _expected(prices: list, orders: list) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The unoptimized topology's output and store through the TopologyTestDriver."""
    with TopologyTestDriver(priced_orders("prices", "orders", "out", "none")) as driver:
        driver.create_input_topic("prices", S, S).pipe_record_list(prices)
        driver.create_input_topic("orders", S, S).pipe_record_list(orders)
        expected: dict[str, list[str]] = {}
        for key, value in driver.create_output_topic("out", S, S).read_key_values_to_list():
            expected.setdefault(key, []).append(value)
        return expected, dict(driver.get_key_value_store("prices").all())


def _topic_exists(bootstrap: str, topic: str) -> bool:
    admin = clients.admin(bootstrap)
    return topic in admin.list_topics(timeout=10).topics


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize(("kind", "mode"), [("source-table", "realtime"), ("source-table", "microbatch"),
                                            ("read-only-store", "realtime")])
def test_a_store_restored_from_its_source_topic_after_a_restart_gives_the_same_results(
        broker, spark, topics, tmp_path, kind, mode):
    """Both execution modes for the source table; the read-only store shares its restore (one mode)."""
    mode_props = {"execution.mode": mode}
    if mode == "realtime":  # batches of 2 s, so that the run crosses batch ends (conftest's mode_props)
        mode_props["realtime.batch.duration.ms"] = 2000
    names = topics(prices=2, orders=2, out=2)
    bootstrap = broker.bootstrap_servers
    base = int(time.time() * 1000) - 600_000
    prices = [(f, f"{p}.00", base + 1000 * p + i) for p in range(1, 4) for i, f in enumerate(FRUITS)]
    prices.append(("fruit7", None, base + 5000))  # a deletion: the store forgets fruit7
    _produce(bootstrap, names["prices"], prices)
    make = priced_orders if kind == "source-table" else read_only_priced_orders
    topology = make(names["prices"], names["orders"], names["out"])
    app_id = f"rt-source-changelog-{uuid.uuid4().hex[:8]}"
    first = run_until_caught_up(spark, topology, broker, tmp_path / "first", app_id, **mode_props)
    expected_orders, expected_store = _expected(prices, [])
    assert dict(first.store(StoreQueryParameters.from_name("prices", KV)).all()) == expected_store
    first.stop()
    assert not _topic_exists(bootstrap, f"{app_id}-prices-changelog")

    # a new, empty state dir: the prices come back from the source topic, up to the committed offsets
    orders = [(f, str(q), base + 10_000 + q) for q, f in enumerate(FRUITS * 2)]
    _produce(bootstrap, names["orders"], orders)
    app = SparkStreams(topology, {
        "application.id": app_id, "bootstrap.servers": bootstrap, "processing.guarantee": "exactly_once_v2",
        "state.dir": str(tmp_path / "second"), "commit.interval.ms": 200, "max.offsets.per.trigger": 200,
        **mode_props}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        assert dict(app.store(StoreQueryParameters.from_name("prices", KV)).all()) == expected_store
    finally:
        app.stop()
    # the prices were restored from their topic: the orders of this run found them
    assert sum(task.restored for task in app.progress.tasks.values()) >= len(expected_store), app.progress
    expected_orders, _ = _expected(prices, orders)
    assert read_updates(bootstrap, names["out"], value_serde=S) == expected_orders
    assert not _topic_exists(bootstrap, f"{app_id}-prices-changelog")


def test_a_restore_from_the_source_topic_stops_at_the_committed_offset(broker, topics, tmp_path):
    """Records past the committed offset are processed again after the restore, so the restore must not
    put them into the store; the store's offset and the checkpoint follow the consumed position."""
    bootstrap = broker.bootstrap_servers
    names = topics(prices=1, orders=1, out=1)
    topology = priced_orders(names["prices"], names["orders"], names["out"])
    prices = [(f"fruit{i}", f"{i}.00", 1_000 + i) for i in range(10)]
    _produce(bootstrap, names["prices"], prices)
    app_id = f"rt-restore-end-{uuid.uuid4().hex[:8]}"
    group = clients.consumer(bootstrap, group_id=app_id)
    group.commit(offsets=[KafkaTopicPartition(names["prices"], 0, 6)], asynchronous=False)
    committed = {(tp.topic, tp.partition): tp.offset
                 for tp in group.committed([KafkaTopicPartition(names["prices"], 0)], 10)}
    group.close()
    assert committed == {(names["prices"], 0): 6}

    config = StreamsConfig({"application.id": app_id, "bootstrap.servers": bootstrap,
                            "state.dir": str(tmp_path)})
    sink = ProducerSink.own(bootstrap, {})
    task = StreamTask(TaskId(0, 0), topology.internal, config, sink, ThreadCache(0))
    reader = end_consumer(bootstrap)
    try:
        task.initialize()
        assert task.changelog_partitions() == {"prices": TopicPartition(names["prices"], 0)}
        assert restore_task(task, reader, committed=committed) == 6
        store = task.context.stores["prices"]
        assert {k: v.value for k, v in store.all()} == {f"fruit{i}": f"{i}.00" for i in range(6)}
        assert task.restore_offsets() == {"prices": 6}
        assert restore_task(task, reader, committed=committed) == 0  # nothing below the committed offset
        task.complete_restoration()

        # the task goes on from the committed offset: the rest arrives by processing
        task.add_records(TopicPartition(names["prices"], 0), [
            ConsumerRecord(names["prices"], 0, offset, ts, key.encode(), value.encode())
            for offset, (key, value, ts) in enumerate(prices) if offset >= 6])
        task.process_all()
        task.prepare_commit()
        task.post_commit()
        assert {k: v.value for k, v in store.all()} == {f"fruit{i}": f"{i}.00" for i in range(10)}
        assert task.restore_offsets() == {"prices": 10}
    finally:
        task.close()
        reader.close()
        sink.close()
    # a commit of 4 records leaves the checkpoint file at the restore's 6; closing brings it up to date
    assert read_checkpoint(tmp_path / app_id / "0_0" / ".checkpoint") == {(names["prices"], 0): 10}
    assert not _topic_exists(bootstrap, f"{app_id}-prices-changelog")


def test_a_restore_without_a_committed_offset_restores_nothing(broker, topics, tmp_path):
    """As Kafka's StoreChangelogReader: no committed offset means the end is 0 (the task reads the topic
    from its reset position and processes every record itself)."""
    bootstrap = broker.bootstrap_servers
    names = topics(prices=1, orders=1, out=1)
    topology = priced_orders(names["prices"], names["orders"], names["out"])
    _produce(bootstrap, names["prices"], [("fruit0", "1.00", 1_000)])
    config = StreamsConfig({"application.id": f"rt-no-commit-{uuid.uuid4().hex[:8]}",
                            "bootstrap.servers": bootstrap, "state.dir": str(tmp_path)})
    sink = ProducerSink.own(bootstrap, {})
    task = StreamTask(TaskId(0, 0), topology.internal, config, sink, ThreadCache(0))
    reader = end_consumer(bootstrap)
    try:
        task.initialize()
        assert restore_task(task, reader, committed={}) == 0
        assert list(task.context.stores["prices"].all()) == []
    finally:
        task.close()
        reader.close()
        sink.close()
