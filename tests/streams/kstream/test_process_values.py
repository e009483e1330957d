"""process_values runs FixedKeyProcessors (Kafka's KIP-820): values may change, keys never, so an
aggregation after it needs no repartition topic and counts in the task of the record's own key.

The bug this guards: process_values took a plain Processor that could re-key, and the count after it then
counted the new key in the task of the old one, with no repartition topic in describe()."""

from __future__ import annotations

import pytest

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    FixedKeyProcessor,
    Processor,
    Record,
    StreamsBuilder,
    TopologyTestDriver,
)
from strom.streams.processor import FixedKeyRecord

S, L = Serdes.String(), Serdes.Long()


class Upper(FixedKeyProcessor):
    def process(self, record: FixedKeyRecord) -> None:
        self.context.forward(record.with_value(record.value.upper()).with_timestamp(record.timestamp + 1))


def _counting(supplier) -> StreamsBuilder:
    builder = StreamsBuilder()
    (builder.stream("in", Consumed.with_(S, S)).process_values(supplier).group_by_key().count()
     .to_stream().to("counts"))
    return builder


def test_process_values_then_count_needs_no_repartition_and_counts_the_records_own_key(props):
    builder = _counting(Upper)
    topology = builder.build()
    assert str(topology.describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [in])\n"
        "      --> KSTREAM-PROCESSVALUES-0000000001\n"
        "    Processor: KSTREAM-PROCESSVALUES-0000000001 (stores: [])\n"
        "      --> KSTREAM-AGGREGATE-0000000003\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])\n"
        "      --> KTABLE-TOSTREAM-0000000004\n"
        "      <-- KSTREAM-PROCESSVALUES-0000000001\n"
        "    Processor: KTABLE-TOSTREAM-0000000004 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000005\n"
        "      <-- KSTREAM-AGGREGATE-0000000003\n"
        "    Sink: KSTREAM-SINK-0000000005 (topic: counts)\n"
        "      <-- KTABLE-TOSTREAM-0000000004\n\n"
    )
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        for key in ("k", "k", "j"):
            source.pipe_input(key, "v", 10)
        counts = driver.create_output_topic("counts", S, L).read_records_to_list()
    assert [(r.key, r.value, r.timestamp) for r in counts] == [("k", 1, 11), ("k", 2, 11), ("j", 1, 11)]


class Rekey(FixedKeyProcessor):
    """Tries every way to change the key; each must fail with a clear error."""

    how = "construct"

    def process(self, record: FixedKeyRecord) -> None:
        if Rekey.how == "construct":
            self.context.forward(FixedKeyRecord("X" + record.key, record.value, record.timestamp, ()))
        elif Rekey.how == "replace":
            self.context.forward(record._replace(key="X" + record.key))
        else:
            self.context.forward(Record("X" + record.key, record.value, record.timestamp))


@pytest.mark.parametrize("how, message", [
    ("construct", "cannot be made with a key of your choice"),
    ("replace", "key cannot change"),
    ("plain-record", "forwards FixedKeyRecords, got Record"),
])
def test_a_key_change_in_process_values_is_refused(props, how, message):
    Rekey.how = how
    with TopologyTestDriver(_counting(Rekey).build(), props) as driver:
        with pytest.raises(TopologyError, match=message):
            driver.create_input_topic("in", S, S).pipe_input("k", "v", 10)
        assert driver.create_output_topic("counts", S, L).is_empty()


class PlainProcessor(Processor):
    def process(self, record: Record) -> None:
        self.context.forward(record.with_key("X"))


def test_process_values_takes_fixed_key_processors_only(props):
    with pytest.raises(TopologyError, match=r"FixedKeyProcessors .* KStream\.process"):
        _counting(PlainProcessor)
    with (pytest.raises(TopologyError, match="got PlainProcessor"),
          TopologyTestDriver(_counting(lambda: PlainProcessor()).build(), props)):
        pass
    with pytest.raises(TopologyError, match="makes a new FixedKeyProcessor"):
        _counting(Upper())
