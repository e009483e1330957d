"""Headers a processor changes reach Kafka through the Spark runtime's sink, in both execution modes: the
input's headers the processors leave alone, their removals and their additions."""

from __future__ import annotations

import pytest

from strom.kafka.serdes import Serdes
from strom.streams import Consumed, FixedKeyProcessor, Processor, Produced, StreamsBuilder, Topology
from support.kafka import produce, read_topic

from .conftest import run_until_caught_up

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

S = Serdes.String()


def stamping(source: str, out: str) -> Topology:
    """process (drops ``secret``, adds ``via``) -> process_values (adds ``len``) -> to. (Processors are
    defined here so Spark's workers get them by value: this test module is not importable there.)"""

    class Stamp(Processor):
        def process(self, record) -> None:
            record.headers.remove("secret").add("via", "stamp")
            self.context.forward(record)

    class Length(FixedKeyProcessor):
        def process(self, record) -> None:
            self.context.forward(record.with_value(record.value.upper()))
            # after the forward: a copy was sent, so this changes nothing downstream
            record.headers.add("late", b"x")

    class Measure(FixedKeyProcessor):
        def process(self, record) -> None:
            record.headers.add("len", str(len(record.value)))
            self.context.forward(record)

    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_(S, S)).process(Stamp).process_values(Length)
     .process_values(Measure).to(out, Produced.with_(S, S)))
    return builder.build()


def test_processors_header_changes_reach_kafka(broker, spark, topics, tmp_path, mode_props):
    names = topics(lines=2, out=2)
    lines = [(f"k{i}", f"v{'x' * (i % 4)}", -1, [("trace", f"t{i}".encode()), ("secret", b"s")])
             for i in range(40)]
    produce(broker.bootstrap_servers, names["lines"], lines)

    run_until_caught_up(spark, stamping(names["lines"], names["out"]), broker, tmp_path,
                        f"rt-headers-{names['lines']}", **mode_props)

    written = {m.key().decode(): (m.value().decode(), m.headers()) for m in read_topic(
        broker.bootstrap_servers, names["out"])}
    assert written == {
        key: (value.upper(), [("trace", headers[0][1]), ("via", b"stamp"), ("len", str(len(value)).encode())])
        for key, value, _, headers in lines}
