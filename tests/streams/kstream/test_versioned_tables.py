"""Versioned tables (KIP-914): a table materialized in a versioned store keeps its history, marks the
updates it stores behind a later version as out of order (joins and group_by drop them), and a
stream-table join reads it as of each stream record's time."""

from __future__ import annotations

import pytest

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    Grouped,
    Joined,
    Materialized,
    Produced,
    StreamsBuilder,
    Suppressed,
    TopologyTestDriver,
    VersionedRecord,
)
from strom.streams.kstream.suppressed import BufferConfig
from strom.streams.processor.api import Processor
from strom.streams.state.stores import Stores

S = Serdes.String()


def versioned(name: str, retention_ms: int = 60_000) -> Materialized:
    return Materialized.as_(Stores.persistent_versioned_key_value_store(name, retention_ms))


def test_a_source_table_keeps_its_history_and_forwards_updates_its_history_keeps(props):
    builder = StreamsBuilder()
    table = builder.table("prices", Consumed.with_(S, S), versioned("prices", 1500))
    table.to_stream().to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        prices = driver.create_input_topic("prices", S, S)
        prices.pipe_input("apple", "1.00", timestamp=1000)
        prices.pipe_input("apple", "1.20", timestamp=3000)
        prices.pipe_input("apple", "1.10", timestamp=2000)  # late: into the history, and forwarded as Kafka's
        prices.pipe_input("apple", "0.90", timestamp=1400)  # older than the history keeps: dropped
        prices.pipe_input("apple", None, timestamp=4000)
        out = driver.create_output_topic("out", S, S).read_records_to_list()
        store = driver.get_versioned_key_value_store("prices")
        assert [(r.value, r.timestamp) for r in out] == [
            ("1.00", 1000), ("1.20", 3000), ("1.10", 2000), (None, 4000)]
        assert store.get("apple") is None
        assert store.get("apple", 2500) == VersionedRecord("1.10", 2000, 3000)
        assert store.get("apple", 3999) == VersionedRecord("1.20", 3000, 4000)


def test_joins_and_group_by_drop_a_versioned_table_s_out_of_order_updates(props):
    builder = StreamsBuilder()
    prices = builder.table("prices", Consumed.with_(S, S), versioned("prices"))
    stock = builder.table("stock", Consumed.with_(S, S))
    prices.join(stock, lambda price, n: f"{n}@{price}").to_stream().to("joined", Produced.with_(S, S))
    (prices.group_by(lambda key, price: (price, key), Grouped.with_(S, S)).count()
     .to_stream().to("counts", Produced.with_(S, Serdes.Long())))
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("stock", S, S).pipe_input("apple", "7", timestamp=0)
        prices_in = driver.create_input_topic("prices", S, S)
        prices_in.pipe_input("apple", "1.00", timestamp=1000)
        prices_in.pipe_input("apple", "1.20", timestamp=3000)
        prices_in.pipe_input("apple", "1.10", timestamp=2000)
        assert driver.create_output_topic("joined", S, S).read_values_to_list() == ["7@1.00", "7@1.20"]
        assert driver.create_output_topic("counts", S, Serdes.Long()).read_key_values_to_list() == [
            ("1.00", 1), ("1.00", 0), ("1.20", 1)]


def test_a_filter_of_a_versioned_table_forwards_deletions_of_rows_it_never_let_through(props):
    builder = StreamsBuilder()
    (builder.table("prices", Consumed.with_(S, S), versioned("prices"))
     .filter(lambda key, price: float(price) < 2)
     .to_stream().to("out", Produced.with_(S, S)))
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("prices", S, S).pipe_input("apple", "5.00", timestamp=1000)
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("apple", None)]


def test_suppress_refuses_a_versioned_table_and_its_unmaterialized_derivations():
    builder = StreamsBuilder()
    table = builder.table("prices", Consumed.with_(S, S), versioned("prices"))
    for versioned_table in (table, table.map_values(lambda price: price + "!")):
        with pytest.raises(TopologyError, match="not versioned"):
            versioned_table.suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    table.map_values(lambda price: price, Materialized.as_("plain")).suppress(
        Suppressed.until_time_limit(10, BufferConfig.unbounded()))


def _join_topology(store: Materialized | None) -> StreamsBuilder:
    builder = StreamsBuilder()
    prices = builder.table("prices", Consumed.with_(S, S), store)
    orders = builder.stream("orders", Consumed.with_(S, S))
    orders.join(prices, lambda qty, price: f"{qty}@{price}").to("out", Produced.with_(S, S))
    return builder


def _join(builder: StreamsBuilder, props) -> list[tuple[str, str]]:
    with TopologyTestDriver(builder.build(), props) as driver:
        prices = driver.create_input_topic("prices", S, S)
        orders = driver.create_input_topic("orders", S, S)
        prices.pipe_input("apple", "1.00", timestamp=1000)
        prices.pipe_input("apple", "1.20", timestamp=3000)
        orders.pipe_input("apple", "5", timestamp=3500)
        orders.pipe_input("apple", "2", timestamp=2000)  # late: placed while the price was 1.00
        orders.pipe_input("apple", "7", timestamp=500)  # before any price
        return driver.create_output_topic("out", S, S).read_key_values_to_list()


def test_a_stream_record_joins_the_versioned_table_as_of_its_own_time(props):
    assert _join(_join_topology(versioned("prices")), props) == [("apple", "5@1.20"), ("apple", "2@1.00")]


def test_without_a_versioned_table_a_late_record_joins_the_latest_value(props):
    assert _join(_join_topology(None), props) == [
        ("apple", "5@1.20"), ("apple", "2@1.20"), ("apple", "7@1.20")]


def test_a_versioned_filter_result_forwards_late_updates_its_history_keeps(props):
    builder = StreamsBuilder()
    (builder.table("prices", Consumed.with_(S, S))
     .filter(lambda key, price: float(price) < 2, versioned("cheap"))
     .to_stream().to("out", Produced.with_(S, S)))
    with TopologyTestDriver(builder.build(), props) as driver:
        prices = driver.create_input_topic("prices", S, S)
        prices.pipe_input("apple", "1.00", timestamp=1000)
        prices.pipe_input("apple", "1.50", timestamp=3000)
        prices.pipe_input("apple", "1.20", timestamp=2000)
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("apple", "1.00"), ("apple", "1.50"), ("apple", "1.20")]
        assert driver.get_versioned_key_value_store("cheap").get("apple", 2500) == VersionedRecord(
            "1.20", 2000, 3000)


def test_a_versioned_aggregate_neither_stores_nor_forwards_one_older_than_its_history(props):
    builder = StreamsBuilder()
    counts = builder.stream("in", Consumed.with_(S, S)).group_by_key().count(versioned("counts", 100))
    counts.to_stream().to("out", Produced.with_(S, Serdes.Long()))
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("a", "x", timestamp=1000)
        source.pipe_input("b", "x", timestamp=10)  # a new key, older than 1000 - 100: its count is lost
        source.pipe_input("a", "x", timestamp=20)  # a's count is at 1000: kept
        assert driver.create_output_topic("out", S, Serdes.Long()).read_key_values_to_list() == [
            ("a", 1), ("a", 2)]
        store = driver.get_versioned_key_value_store("counts")
        assert store.get("b") is None
        assert store.get("a") == VersionedRecord(2, 1000)


def test_a_versioned_table_aggregate_keeps_its_history(props):
    builder = StreamsBuilder()
    table = builder.table("in", Consumed.with_(S, S))
    sums = table.group_by(lambda key, value: ("all", value), Grouped.with_(S, S)).reduce(
        lambda a, b: str(int(a) + int(b)), lambda a, b: str(int(a) - int(b)), versioned("sums", 100))
    sums.to_stream().to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("a", "1", timestamp=1000)
        source.pipe_input("b", "2", timestamp=1010)
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["1", "3"]
        sums_store = driver.get_versioned_key_value_store("sums")
        assert sums_store.get("all", 1005) == VersionedRecord("1", 1000, 1010)


def test_a_cogroup_refuses_a_versioned_store_with_a_way_out():
    builder = StreamsBuilder()
    grouped = builder.stream("in", Consumed.with_(S, S)).group_by_key()
    with pytest.raises(TopologyError, match="persistent_timestamped_key_value_store"):
        grouped.cogroup(lambda key, value, agg: agg + value).aggregate(lambda: "", versioned("cogrouped"))


class LatestBefore(Processor):
    """Processor API: remembers each key's values and answers with the previous one."""

    def init(self, context) -> None:
        self.context = context
        self.store = context.get_state_store("history")

    def process(self, record) -> None:
        before = self.store.get(record.key, record.timestamp - 1)
        self.store.put(record.key, record.value, record.timestamp)
        self.context.forward(record.with_value(None if before is None else before.value))


def test_the_processor_api_reads_and_writes_a_versioned_store(props):
    builder = StreamsBuilder()
    supplier = Stores.persistent_versioned_key_value_store("history", 10_000)
    builder.add_state_store(Stores.versioned_key_value_store_builder(supplier, S, S))
    stream = builder.stream("in", Consumed.with_(S, S))
    stream.process(LatestBefore, "history").to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        for value, timestamp in [("a", 10), ("b", 20), ("late", 15), ("c", 30)]:
            source.pipe_input("k", value, timestamp=timestamp)
        assert [v for _, v in driver.create_output_topic("out", S, S).read_key_values_to_list()] == [
            None, "a", "a", "b"]


def test_the_driver_says_which_getter_reads_a_plain_store(props):
    builder = StreamsBuilder()
    builder.table("in", Consumed.with_(S, S), Materialized.as_("plain"))
    with (TopologyTestDriver(builder.build(), props) as driver,
          pytest.raises(TopologyError, match="not versioned; read it with get_key_value_store")):
        driver.get_versioned_key_value_store("plain")


def _graced(grace_ms: int, retention_ms: int = 60_000) -> StreamsBuilder:
    builder = StreamsBuilder()
    prices = builder.table("prices", Consumed.with_(S, S), versioned("prices", retention_ms))
    orders = builder.stream("orders", Consumed.with_(S, S))
    joined = Joined.with_(S, S).with_grace_period(grace_ms)
    orders.join(prices, lambda qty, price: f"{qty}@{price}", joined).to("out", Produced.with_(S, S))
    return builder


def test_with_a_grace_period_records_wait_for_late_table_updates_and_leave_in_time_order(props):
    with TopologyTestDriver(_graced(1000).build(), props) as driver:
        prices = driver.create_input_topic("prices", S, S)
        orders = driver.create_input_topic("orders", S, S)
        out = driver.create_output_topic("out", S, S)
        prices.pipe_input("apple", "1.00", timestamp=1000)
        orders.pipe_input("apple", "a", timestamp=2500)
        orders.pipe_input("apple", "b", timestamp=2000)  # out of order, within the grace period
        assert out.is_empty()
        prices.pipe_input("apple", "1.10", timestamp=1500)  # a late update: b and a must see it
        orders.pipe_input("apple", "c", timestamp=3600)  # stream time 3600: 2000 and 2500 are due
        assert [(r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("b@1.10", 2000), ("a@1.10", 2500)]
        orders.pipe_input("apple", "d", timestamp=1200)  # already older than stream time - grace
        assert out.read_key_values_to_list() == [("apple", "d@1.00")]


def test_buffered_records_of_one_timestamp_leave_by_key_then_arrival(props):
    """Kafka Streams' buffer is keyed by time, key bytes, then a sequence number: its order."""
    with TopologyTestDriver(_graced(100).build(), props) as driver:
        prices = driver.create_input_topic("prices", S, S)
        for fruit in ("apple", "pear"):
            prices.pipe_input(fruit, "1.00", timestamp=0)
        orders = driver.create_input_topic("orders", S, S)
        for fruit, qty in [("pear", "a"), ("apple", "b"), ("pear", "c")]:
            orders.pipe_input(fruit, qty, timestamp=10)
        orders.pipe_input("apple", "d", timestamp=500)
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("apple", "b@1.00"), ("pear", "a@1.00"), ("pear", "c@1.00")]


def test_a_grace_period_buffer_of_a_stream_without_serdes_uses_the_default_serdes(props):
    builder = StreamsBuilder()
    prices = builder.table("prices", Consumed.with_(S, S), versioned("prices"))
    orders = builder.stream("orders", Consumed.with_(S, S)).map_values(lambda qty: qty + "!")  # no serde
    orders.join(prices, lambda qty, price: f"{qty}@{price}", Joined.with_().with_grace_period(100)).to("out")
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("prices", S, S).pipe_input("apple", "1.00", timestamp=0)
        orders_in = driver.create_input_topic("orders", S, S)
        orders_in.pipe_input("apple", "2", timestamp=10)
        orders_in.pipe_input("apple", "3", timestamp=200)
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["2!@1.00"]


def test_buffered_records_survive_a_restart(props, tmp_path):
    props = {**props, "state.dir": str(tmp_path)}
    with TopologyTestDriver(_graced(1000).build(), props) as driver:
        driver.create_input_topic("prices", S, S).pipe_input("apple", "1.00", timestamp=1000)
        driver.create_input_topic("orders", S, S).pipe_input("apple", "a", timestamp=2000)
        assert driver.create_output_topic("out", S, S).is_empty()
    with TopologyTestDriver(_graced(1000).build(), props) as driver:
        driver.create_input_topic("orders", S, S).pipe_input("apple", "b", timestamp=5000)
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("apple", "a@1.00")]


def test_a_grace_period_needs_a_versioned_table_that_keeps_it():
    builder = StreamsBuilder()
    prices = builder.table("prices", Consumed.with_(S, S))
    orders = builder.stream("orders", Consumed.with_(S, S))
    with pytest.raises(TopologyError, match="needs a versioned table"):
        orders.join(prices, lambda a, b: a, Joined().with_grace_period(1000))
    with pytest.raises(TopologyError, match="longer than the history retention"):
        _graced(grace_ms=5000, retention_ms=1000)


def test_a_stream_record_joins_a_versioned_global_table_as_of_its_time(props):
    builder = StreamsBuilder()
    rates = builder.global_table("rates", Consumed.with_(S, S), Materialized.as_(
        Stores.persistent_versioned_key_value_store("rates", 60_000)))
    (builder.stream("payments", Consumed.with_(S, S))
     .join(rates, lambda key, payment: payment.split(":")[0], lambda payment, rate: f"{payment}*{rate}")
     .to("out", Produced.with_(S, S)))
    with TopologyTestDriver(builder.build(), props) as driver:
        rates_in = driver.create_input_topic("rates", S, S)
        rates_in.pipe_input("EUR", "1.1", timestamp=1000)
        rates_in.pipe_input("EUR", "1.2", timestamp=3000)
        payments = driver.create_input_topic("payments", S, S)
        payments.pipe_input("p1", "EUR:10", timestamp=3500)
        payments.pipe_input("p2", "EUR:20", timestamp=2000)
        payments.pipe_input("p3", "EUR:30", timestamp=500)
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("p1", "EUR:10*1.2"), ("p2", "EUR:20*1.1")]
        rates_store = driver.get_versioned_key_value_store("rates")
        assert rates_store.get("EUR", 2000) == VersionedRecord("1.1", 1000, 3000)


def test_a_table_table_join_result_in_a_versioned_store_keeps_results_older_than_the_latest_as_history(props):
    builder = StreamsBuilder()
    left = builder.table("left", Consumed.with_(S, S))
    right = builder.table("right", Consumed.with_(S, S))
    joined = left.join(right, lambda a, b: f"{a}+{b}", versioned("joined"))
    joined.to_stream().to("out", Produced.with_(S, S))
    with TopologyTestDriver(builder.build(), props) as driver:
        left_in, right_in = driver.create_input_topic("left", S, S), driver.create_input_topic("right", S, S)
        left_in.pipe_input("a", "x", timestamp=5000)
        right_in.pipe_input("a", "1", timestamp=5000)
        right_in.pipe_input("a", "2", timestamp=100)  # a plain table takes it as the latest
        left_in.pipe_input("a", "y", timestamp=200)  # a result at 200, behind the one at 5000
        out = driver.create_output_topic("out", S, S).read_records_to_list()
        assert [(r.value, r.timestamp) for r in out] == [("x+1", 5000), ("x+2", 5000), ("y+2", 200)]
        store = driver.get_versioned_key_value_store("joined")
        assert store.get("a") == VersionedRecord("x+2", 5000)
        assert store.get("a", 300) == VersionedRecord("y+2", 200, 5000)
