"""GlobalKTable: filled from every partition of its topic, read by every task; KStream-GlobalKTable joins."""

from strom.kafka.serdes import Serdes
from strom.streams.config import StreamsConfig
from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.options import Materialized
from strom.streams.processor.internals.global_state import GlobalStateStores
from strom.streams.test_driver import TopologyTestDriver

PROPS = {"application.id": "global", "default.key.serde": "String", "default.value.serde": "String"}


def _topology(kind):
    builder = StreamsBuilder()
    products = builder.global_table("products", materialized=Materialized.as_("products-store"))
    orders = builder.stream("orders")
    # orders are keyed by order id; the value names the product
    getattr(orders, kind)(products, lambda order_id, product: product,
                          lambda order, product: f"{order}:{product}").to("output")
    return builder.build()


def _run(kind, events):
    with TopologyTestDriver(_topology(kind), PROPS) as driver:
        topics = {t: driver.create_input_topic(t, Serdes.String(), Serdes.String())
                  for t in ("products", "orders")}
        for topic, key, value in events:
            topics[topic].pipe_input(key, value, 0)
        store = driver.get_key_value_store("products-store")
        contents = dict(store.all())
        output = driver.create_output_topic("output", Serdes.String(), Serdes.String())
        return output.read_key_values_to_list(), contents


EVENTS = [("orders", "o1", "p1"), ("products", "p1", "apple"), ("orders", "o2", "p1"),
          ("orders", "o3", "p2"), ("products", "p1", None), ("orders", "o4", "p1")]


def test_inner_join_with_key_selector():
    output, contents = _run("join", EVENTS)
    assert output == [("o2", "p1:apple")]
    assert contents == {}


def test_left_join_keeps_unmatched_stream_records():
    output, _ = _run("left_join", EVENTS)
    assert output == [("o1", "p1:None"), ("o2", "p1:apple"), ("o3", "p2:None"), ("o4", "p1:None")]


def test_a_left_join_after_a_repartition_still_gets_null_keys():
    """The repartition topic keeps null keys for a left join downstream (KIP-962), as for a KTable's: the
    key selector reads the value. An inner join's repartition drops them."""
    def run(kind):
        builder = StreamsBuilder()
        products = builder.global_table("products", materialized=Materialized.as_("products-store"))
        getattr(builder.stream("orders").repartition(), kind)(
            products, lambda order_id, product: product, lambda order, product: f"{order}:{product}",
        ).to("output")
        strings = Serdes.String()
        with TopologyTestDriver(builder.build(), PROPS) as driver:
            driver.create_input_topic("products", strings, strings).pipe_input("p1", "apple", 0)
            driver.create_input_topic("orders", strings, strings).pipe_input(None, "p1", 0)
            return driver.create_output_topic("output", strings, strings).read_key_values_to_list()

    assert run("left_join") == [(None, "p1:apple")]
    assert run("join") == []


def test_global_store_is_filled_from_every_partition(tmp_path):
    builder = StreamsBuilder()
    builder.global_table("products", materialized=Materialized.as_("products-store"))
    config = StreamsConfig(PROPS | {"state.dir": str(tmp_path)})
    state = GlobalStateStores(builder.build().internal.global_stores, config, tmp_path / "global")
    key, value = Serdes.String(), Serdes.String()
    records = [(partition, offset, 10 * offset, key.serialize("products", f"p{partition}{offset}"),
                value.serialize("products", f"v{partition}{offset}"))
               for partition in range(3) for offset in range(2)]
    assert state.apply("products", records) == 6
    store = state.stores["products-store"]
    assert store.get("p21").value == "v21" and store.get("p21").timestamp == 10
    assert state.offsets == {("products", 0): 2, ("products", 1): 2, ("products", 2): 2}
    # restoring is replaying the topic: a fresh instance reading it again has the same contents
    again = GlobalStateStores(builder.build().internal.global_stores, config, tmp_path / "again")
    again.apply("products", records)
    assert dict(again.stores["products-store"].all()) == dict(store.all())
    state.close()
    again.close()


def test_describe_lists_the_global_store_after_the_task_sub_topologies():
    text = str(_topology("join").describe())
    assert "Sub-topology: 1 for global store (will not generate tasks)\n" \
           "    Source: KSTREAM-SOURCE-0000000000 (topics: [products])\n" \
           "      --> KTABLE-SOURCE-0000000001\n" \
           "    Processor: KTABLE-SOURCE-0000000001 (stores: [products-store])\n" in text
