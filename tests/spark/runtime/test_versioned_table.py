"""A versioned table on Spark, exactly-once: late orders join the price that was valid when they were
placed, also after the state directory is wiped and the history is restored from the changelog; the
history can be queried as of a time."""

from __future__ import annotations

import time

import pytest

from strom.kafka.clients import JAVA_PARTITIONER
from strom.spark.runtime import SparkStreams
from strom.streams import (
    Consumed,
    Materialized,
    Produced,
    QueryableStoreTypes,
    StoreQueryParameters,
    StreamsBuilder,
    Topology,
    VersionedRecord,
)
from strom.streams.state.stores import Stores
from support.kafka import Record, produce

from .conftest import read_updates, run_until_caught_up
from .wordcount import S

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

FRUITS = [f"fruit{i}" for i in range(6)]


def priced_orders(prices: str, orders: str, out: str) -> Topology:
    builder = StreamsBuilder()
    table = builder.table(prices, Consumed.with_(S, S),
                          Materialized.as_(Stores.persistent_versioned_key_value_store("prices", 3_600_000)))
    (builder.stream(orders, Consumed.with_(S, S))
        .join(table, lambda quantity, price: f"{quantity}@{price}")
        .to(out, Produced.with_(S, S)))
    return builder.build()


def produce_at(bootstrap: str, topic: str, records: list[tuple[str, str, int]]) -> None:
    produce(bootstrap, topic, [Record(key, value, timestamp=timestamp) for key, value, timestamp in records],
            **JAVA_PARTITIONER)


def test_late_orders_join_the_price_of_their_time_across_a_restore(broker, spark, topics, tmp_path,
                                                                   mode_props):
    names = topics(prices=2, orders=2, out=2)
    bootstrap = broker.bootstrap_servers
    # recent timestamps: records older than the topic's retention (7 days) may be deleted at any time
    base = (int(time.time() * 1000) // 100_000 - 10) * 100_000
    # price p of each fruit valid from base + 10_000 * p to base + 10_000 * (p + 1)
    produce_at(bootstrap, names["prices"],
               [(f, f"{p}.00", base + 10_000 * p) for p in range(1, 4) for f in FRUITS])
    topology = priced_orders(names["prices"], names["orders"], names["out"])
    app_id = f"rt-versioned-{names['prices']}"
    run_until_caught_up(spark, topology, broker, tmp_path / "first", app_id, **mode_props)

    # orders arrive after every price, most of them late: each must see the price of its own time
    orders = [(f, str(q), base + 10_000 * p + 5_000) for q, (p, f) in enumerate(
        (p, f) for p in (3, 1, 2, 1) for f in FRUITS)]
    orders.append(("fruit0", "early", base + 5_000))  # before the first price: the inner join drops it
    produce_at(bootstrap, names["orders"], orders)
    app = SparkStreams(topology, {  # a new state dir: the history comes back from the changelog
        "application.id": app_id, "bootstrap.servers": bootstrap, "processing.guarantee": "exactly_once_v2",
        "state.dir": str(tmp_path / "second"), "commit.interval.ms": 200, "max.offsets.per.trigger": 200,
        **mode_props}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        query = StoreQueryParameters.from_name("prices", QueryableStoreTypes.versioned_key_value_store())
        store = app.store(query)
        assert store.get("fruit3") == VersionedRecord("3.00", base + 30_000, None)
        assert store.get("fruit3", base + 25_000) == VersionedRecord("2.00", base + 20_000, base + 30_000)
    finally:
        app.stop()

    expected: dict[str, list[str]] = {}
    for fruit, quantity, timestamp in orders[:-1]:
        expected.setdefault(fruit, []).append(f"{quantity}@{(timestamp - base) // 10_000}.00")
    assert read_updates(bootstrap, names["out"], value_serde=S) == expected
