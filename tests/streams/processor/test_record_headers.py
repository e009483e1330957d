"""Records' headers are Kafka's mutable ``Headers``: a processor adds, removes and reads them, and the
changes travel with the record it forwards, through DSL operators into the output topic. ``with_*`` copy
them (Kafka's Record copies its headers), so a copy's changes leave the original as it was."""

from __future__ import annotations

from strom.kafka.headers import Header, Headers
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
from strom.streams.test_driver import TestRecord

S = Serdes.String()


def _run(props, build, records):
    builder = StreamsBuilder()
    build(builder.stream("in", Consumed.with_(S, S))).to("out")
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        for record in records:
            source.pipe_input(record)
        return driver.create_output_topic("out", S, S).read_records_to_list()


class Stamp(Processor):
    """Reads the input's trace header, drops it, and adds where the record went."""

    def process(self, record: Record) -> None:
        trace = record.headers.last_header("trace")
        record.headers.remove("trace").add("seen", trace.value if trace else b"none").add("by", "stamp")
        self.context.forward(record)


def test_a_processors_header_changes_reach_the_output_topic(props):
    out = _run(props, lambda stream: stream.process(Stamp), [
        TestRecord("k", "v", 1, (("trace", b"t1"), ("keep", b"x"))),
        TestRecord("j", "w", 2),
    ])
    assert [r.headers for r in out] == [
        (("keep", b"x"), ("seen", b"t1"), ("by", b"stamp")),
        (("seen", b"none"), ("by", b"stamp")),
    ]


def test_header_changes_travel_through_dsl_operators_after_the_processor(props):
    out = _run(props, lambda stream: stream.process(Stamp).map_values(str.upper).filter(lambda k, v: True),
               [TestRecord("k", "v", 1, (("trace", b"t1"),))])
    assert [(r.value, r.headers) for r in out] == [("V", (("seen", b"t1"), ("by", b"stamp")))]


def test_records_that_nobody_asks_for_headers_keep_the_tuple_they_were_read_with(props):
    class Look(Processor):
        def process(self, record: Record) -> None:
            seen.append(type(record.raw_headers))
            self.context.forward(record.with_value(record.value + "!"))

    seen: list[type] = []
    out = _run(props, lambda stream: stream.process(Look), [TestRecord("k", "v", 1, (("a", b"1"),))])
    assert seen == [tuple]
    assert [(r.value, r.headers) for r in out] == [("v!", (("a", b"1"),))]


def test_with_copies_headers_so_a_copy_changes_without_touching_the_original(props):
    class Split(Processor):
        def process(self, record: Record) -> None:
            record.headers.add("both", b"1")
            copy = record.with_value(record.value + "-copy")
            copy.headers.add("copy-only", b"2")
            self.context.forward(copy)
            self.context.forward(record)

    out = _run(props, lambda stream: stream.process(Split), [TestRecord("k", "v", 1)])
    assert [(r.value, r.headers) for r in out] == [
        ("v-copy", (("both", b"1"), ("copy-only", b"2"))),
        ("v", (("both", b"1"),)),
    ]


def test_the_context_headers_are_the_record_being_processed_and_go_with_its_forward(props):
    class ViaContext(Processor):
        def process(self, record: Record) -> None:
            headers = self.context.headers()
            assert headers is self.context.headers()
            headers.add("ctx", headers.last_header("in").value + b"+")
            self.context.forward(record)

    out = _run(props, lambda stream: stream.process(ViaContext), [TestRecord("k", "v", 1, (("in", b"i"),))])
    assert [r.headers for r in out] == [(("in", b"i"), ("ctx", b"i+"))]


def test_a_child_processor_sees_its_parents_changes_in_record_and_context(props):
    class Child(Processor):
        def process(self, record: Record) -> None:
            seen.append((list(record.headers), list(self.context.headers())))
            self.context.forward(record)

    seen: list = []
    _run(props, lambda stream: stream.process(Stamp).process(Child), [TestRecord("k", "v", 1)])
    assert seen == [([("seen", b"none"), ("by", b"stamp")],) * 2]


def test_process_values_changes_headers_of_fixed_key_records(props):
    class Tag(FixedKeyProcessor):
        def process(self, record: FixedKeyRecord) -> None:
            record.headers.remove("drop").add("tag", record.value)
            self.context.forward(record.with_value(record.value * 2))

    out = _run(props, lambda stream: stream.process_values(Tag),
               [TestRecord("k", "ab", 1, (("drop", b"1"), ("keep", None)))])
    assert [(r.key, r.value, r.headers) for r in out] == [("k", "abab", (("keep", None), ("tag", b"ab")))]


def test_a_record_built_with_headers_copies_them_and_compares_by_pairs():
    given = Headers([("a", b"1")])
    record = Record("k", "v", 1, given)
    given.add("b", b"2")
    assert record.headers == (("a", b"1"),)
    assert record == Record("k", "v", 1, (("a", b"1"),))
    assert Record("k", "v", 1).headers == [] and Record("k", "v", 1, None).raw_headers == ()
    assert record.with_headers(None).headers == () and record.headers.last_header("a") == Header("a", b"1")
