"""A KStream-GlobalKTable join, and a global store filled by its own processor (add_global_store), on Spark
give the TopologyTestDriver's result.

Every task reads the whole global table (all partitions of its topic) into its Python worker's
global stores before processing, and catches up with it on every batch.
"""

from __future__ import annotations

import random

import pytest

from strom.streams import (
    Consumed,
    Processor,
    Produced,
    Serdes,
    Stores,
    StreamsBuilder,
    Topology,
    TopologyTestDriver,
)
from support.kafka import read_topic

from .conftest import produce_lines, run_until_caught_up

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]
S = Serdes.String()


def enriched_orders(orders: str, users: str, out: str) -> Topology:
    """Orders keyed by order id, valued by user id, joined with the users table (user id → name)."""
    builder = StreamsBuilder()
    names = builder.global_table(users, Consumed.with_(S, S))
    (builder.stream(orders, Consumed.with_(S, S))
        .join(names, lambda order, user: user, lambda order, user, name: f"{user}:{name}")
        .to(out, Produced.with_(S, S)))
    return builder.build()


def orders_with_global_store(orders: str, users: str, out: str) -> Topology:
    """The same with a global store that its own processor fills with upper-cased names. (Processors
    are defined here so Spark's workers get them by value: this test module is not importable there.)"""

    class UpperNames(Processor):
        def init(self, context) -> None:
            self.names = context.get_state_store("names")

        def process(self, record) -> None:
            self.names.put(record.key, record.value.upper())

    class NameOrders(Processor):
        def init(self, context) -> None:
            self.context = context
            self.names = context.get_state_store("names")

        def process(self, record) -> None:
            name = self.names.get(record.value)
            if name is not None:
                self.context.forward(record.with_value(f"{record.value}:{name}"))

    builder = StreamsBuilder()
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("names"), S, S)
    builder.add_global_store(store.with_logging_disabled(), users, Consumed.with_(S, S), UpperNames)
    builder.stream(orders, Consumed.with_(S, S)).process(NameOrders).to(out, Produced.with_(S, S))
    return builder.build()


def _driver_output(topics: dict[str, str], users: list, orders: list,
                   topology=enriched_orders) -> dict[str, str]:
    with TopologyTestDriver(topology(topics["orders"], topics["users"], topics["out"])) as driver:
        driver.create_input_topic(topics["users"], S, S).pipe_record_list(users)
        driver.create_input_topic(topics["orders"], S, S).pipe_record_list(orders)
        return driver.create_output_topic(topics["out"], S, S).read_key_values_to_map()


@pytest.mark.parametrize("topology", [enriched_orders, orders_with_global_store])
def test_stream_global_table_join_matches_topology_test_driver(broker, spark, topics, tmp_path, topology,
                                                               mode_props):
    names = topics(orders=2, users=3, out=2)
    rng = random.Random(5)
    users = [(f"u{i}", f"name-{i}") for i in range(30)]  # u25..u29 have no orders, u30+ no user
    orders = [(f"o{i}", f"u{rng.randrange(35)}") for i in range(200)]
    produce_lines(broker.bootstrap_servers, names["users"], users)
    produce_lines(broker.bootstrap_servers, names["orders"], orders)

    run_until_caught_up(spark, topology(names["orders"], names["users"], names["out"]), broker, tmp_path,
                        f"rt-global-{names['orders']}", **mode_props)

    expected = _driver_output(names, users, orders, topology)
    assert 150 < len(expected) < 200  # some orders name no known user: the inner join drops them
    written = read_topic(broker.bootstrap_servers, names["out"])
    assert {m.key().decode(): m.value().decode() for m in written} == expected
