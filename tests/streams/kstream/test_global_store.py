"""StreamsBuilder.add_global_store: a global store written by the user's processor from every record of its
topic (null keys too), readable by every processor; what that processor may not do is refused clearly."""

from __future__ import annotations

import pytest

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import Consumed, Produced, Stores, StreamsBuilder, TopologyTestDriver
from strom.streams.processor.api import Processor

S = Serdes.String()
PROPS = {"application.id": "global-store", "default.key.serde": "String", "default.value.serde": "String"}


class CurrencyRates(Processor):
    """Keeps each currency's rate; a record without a key resets every rate."""

    def init(self, context) -> None:
        self.rates = context.get_state_store("rates")
        self.context = context

    def process(self, record) -> None:
        if record.key is None:
            for currency, _ in list(self.rates.all()):
                self.rates.delete(currency)
            return
        self.rates.put(record.key, f"{record.value} (offset {self.context.record_metadata().offset})")


class Convert(Processor):
    def init(self, context) -> None:
        self.context = context
        self.rates = context.get_state_store("rates")

    def process(self, record) -> None:
        self.context.forward(record.with_value(f"{record.value} @ {self.rates.get(record.key)}"))


def rates_store(logging: bool = False):
    builder = Stores.key_value_store_builder(Stores.in_memory_key_value_store("rates"), S, S)
    return builder if logging else builder.with_logging_disabled()


def topology(processor=CurrencyRates):
    builder = StreamsBuilder()
    builder.add_global_store(rates_store(), "rates", Consumed.with_(S, S), processor)
    builder.stream("payments", Consumed.with_(S, S)).process(Convert).to("out", Produced.with_(S, S))
    return builder.build()


def test_the_processor_fills_the_store_that_every_processor_reads():
    built = topology()
    assert "rates" in str(built.describe())
    with TopologyTestDriver(built, PROPS) as driver:
        rates = driver.create_input_topic("rates", S, S)
        payments = driver.create_input_topic("payments", S, S)
        rates.pipe_input("EUR", "1.1")
        rates.pipe_input("USD", "1.0")
        payments.pipe_input("EUR", "10")
        rates.pipe_input(None, "reset")
        payments.pipe_input("USD", "5")
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("EUR", "10 @ 1.1 (offset 0)"), ("USD", "5 @ None")]


def test_a_logged_store_or_a_processor_instance_is_refused():
    builder = StreamsBuilder()
    with pytest.raises(TopologyError, match="with_logging_disabled"):
        builder.add_global_store(rates_store(logging=True), "rates", None, CurrencyRates)
    with pytest.raises(TopologyError, match="supplier that makes a new processor"):
        builder.add_global_store(rates_store(), "rates", None, CurrencyRates())
    builder.add_global_store(rates_store(), "rates", None, CurrencyRates)
    with pytest.raises(TopologyError, match="already read by a global store"):
        builder.global_table("rates")


class Forwarding(Processor):
    def init(self, context) -> None:
        self.context = context

    def process(self, record) -> None:
        self.context.forward(record)


def test_a_global_processor_cannot_forward():
    with TopologyTestDriver(topology(Forwarding), PROPS) as driver, \
            pytest.raises(TopologyError, match="cannot forward"):
        driver.create_input_topic("rates", S, S).pipe_input("EUR", "1.1")


def test_topology_description_lists_the_global_stores():
    description = topology().describe()
    [store] = description.global_stores()
    assert store.id == 1 and store.id == description.subtopologies[-1].id
    assert store.source.kind == "Source" and store.source.detail == "topics: [rates]"
    assert store.processor.kind == "Processor" and store.processor.detail == "stores: [rates]"
    assert store.source.successors == [store.processor.name]
    assert StreamsBuilder().build().describe().global_stores() == []


def test_the_processor_api_adds_the_same_global_store():
    from strom.streams import Topology

    seen = {}

    class Rates(CurrencyRates):
        def init(self, context) -> None:
            super().init(context)
            seen.update(configs=context.app_configs_with_prefix("default."), key=context.key_serde())

    topology = (Topology()
                .add_global_store(rates_store(), "rates-source", S, S, "rates", "rates-processor", Rates)
                .add_source("payments", "payments", key_serde=S, value_serde=S)
                .add_processor("convert", Convert, "payments")
                .add_sink("out", "out", "convert", key_serde=S, value_serde=S))
    [store] = topology.describe().global_stores()
    assert (store.source.name, store.processor.name) == ("rates-source", "rates-processor")
    with TopologyTestDriver(topology, PROPS) as driver:
        driver.create_input_topic("rates", S, S).pipe_input("EUR", "1.1")
        driver.create_input_topic("payments", S, S).pipe_input("EUR", "10")
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [
            ("EUR", "10 @ 1.1 (offset 0)")]
    assert seen["configs"]["key.serde"] == "String" and isinstance(seen["key"], type(S))
    with pytest.raises(TopologyError, match="logging disabled"):
        Topology().add_global_store(rates_store(logging=True), "s", S, S, "rates", "p", Rates)
    with pytest.raises(TopologyError, match="node named 'payments'"):
        (Topology().add_source("payments", "payments")
         .add_global_store(rates_store(), "payments", S, S, "rates", "p", Rates))
