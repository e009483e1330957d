"""An application whose topology has a repartition, a stream-table join, a global store and a
punctuating processor with a store: pictured by test_topology_graph.py and `strom streams describe`."""

from __future__ import annotations

from strom.streams import (
    Consumed,
    Materialized,
    Processor,
    Produced,
    PunctuationType,
    Record,
    Serdes,
    Stores,
    StreamsBuilder,
    Topology,
)

S = Serdes.String()


class LastSeen(Processor):
    """Forwards each record and, every second of stream time, the number of keys seen."""

    def init(self, context):
        self.context = context
        self.seen = context.get_state_store("last-seen")
        context.schedule(1000, PunctuationType.STREAM_TIME, self.punctuate)

    def process(self, record: Record) -> None:
        self.seen.put(record.key, record.value)
        self.context.forward(record)

    def punctuate(self, timestamp: int) -> None:
        self.context.forward(Record("keys", str(self.seen.approximate_num_entries()), timestamp))


def build() -> tuple[Topology, dict[str, object]]:
    builder = StreamsBuilder()
    products = builder.global_table("products", Consumed.with_(S, S), Materialized.as_("products-store"))
    customers = builder.table("customers", Consumed.with_(S, S), Materialized.as_("customers-store"))
    last_seen = Stores.in_memory_key_value_store("last-seen")
    builder.add_state_store(Stores.key_value_store_builder(last_seen, S, S))
    (builder.stream("orders", Consumed.with_(S, S))
        .select_key(lambda key, order: order.split(",")[0])
        .join(customers, lambda order, customer: f"{order};{customer}")
        .join(products, lambda key, order: order.split(",")[1], lambda order, product: f"{order};{product}")
        .process(LastSeen, "last-seen")
        .to("enriched-orders", Produced.with_(S, S)))
    return builder.build(), {"application.id": "enrichment", "processing.guarantee": "exactly_once_v2"}
