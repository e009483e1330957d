"""Stateless KStream operators behave as Kafka Streams documents them."""

from __future__ import annotations

import pytest

from strom.errors import ProcessingError, TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Branched,
    Consumed,
    Named,
    Printed,
    Produced,
    Repartitioned,
    StreamsBuilder,
    TestRecord,
    TopologyTestDriver,
)

S = Serdes.String()


def run(builder, props, records, outputs=("out",), value_serde=S, topic="in"):
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic(topic, S, S)
        for key, value in records:
            source.pipe_input(key, value)
        result = {
            name: driver.create_output_topic(name, S, value_serde).read_key_values_to_list()
            for name in outputs
        }
    return result if len(outputs) > 1 else result[outputs[0]]


def test_filter_and_filter_not_keep_matching_records(props):
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.filter(lambda k, v: v.startswith("a")).to("kept")
    stream.filter_not(lambda k, v: v.startswith("a")).to("dropped")
    out = run(
        builder, props, [("1", "apple"), ("2", "banana"), ("3", "avocado")], outputs=("kept", "dropped")
    )
    assert out["kept"] == [("1", "apple"), ("3", "avocado")]
    assert out["dropped"] == [("2", "banana")]


def test_map_values_takes_value_or_key_and_value(props):
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.map_values(str.upper).to("upper")
    stream.map_values(lambda key, value: f"{key}:{value}").to("both")
    out = run(builder, props, [("k", "v")], outputs=("upper", "both"))
    assert out == {"upper": [("k", "V")], "both": [("k", "k:v")]}


def test_map_flat_map_and_select_key_change_keys(props):
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.map(lambda k, v: (v, k)).to("swapped")
    stream.flat_map(lambda k, v: [(c, k) for c in v]).to("chars")
    stream.select_key(lambda k, v: v[0]).to("first")
    stream.flat_map_values(lambda v: v.split(",")).to("parts")
    out = run(builder, props, [("k", "ab,c")], outputs=("swapped", "chars", "first", "parts"))
    assert out["swapped"] == [("ab,c", "k")]
    assert out["chars"] == [("a", "k"), ("b", "k"), (",", "k"), ("c", "k")]
    assert out["first"] == [("a", "ab,c")]
    assert out["parts"] == [("k", "ab"), ("k", "c")]


def test_peek_and_foreach_see_every_record(props):
    seen, consumed = [], []
    builder = StreamsBuilder()
    stream = builder.stream("in").peek(lambda k, v: seen.append((k, v)))
    stream.to("out")
    stream.foreach(lambda k, v: consumed.append(v))
    assert run(builder, props, [("a", "1"), ("b", "2")]) == [("a", "1"), ("b", "2")]
    assert seen == [("a", "1"), ("b", "2")]
    assert consumed == ["1", "2"]


def test_split_routes_to_first_matching_branch_and_default(props):
    builder = StreamsBuilder()
    branches = (
        builder.stream("in")
        .split(Named.as_("route-"))
        .branch(lambda k, v: int(v) < 0, Branched.as_("negative"))
        .branch(lambda k, v: int(v) == 0)
        .default_branch(Branched.as_("other"))
    )
    assert set(branches) == {"route-negative", "route-2", "route-other"}
    branches["route-negative"].to("neg")
    branches["route-2"].to("zero")
    branches["route-other"].to("pos")
    out = run(
        builder, props, [("a", "-1"), ("b", "0"), ("c", "5"), ("d", "-7")], outputs=("neg", "zero", "pos")
    )
    assert out == {"neg": [("a", "-1"), ("d", "-7")], "zero": [("b", "0")], "pos": [("c", "5")]}


def test_split_branch_with_function_and_consumer(props):
    builder = StreamsBuilder()
    result = (
        builder.stream("in")
        .split()
        .branch(lambda k, v: v == "x", Branched.with_consumer(lambda s: s.to("xs")))
        .default_branch(Branched.with_function(lambda s: s.map_values(str.upper)))
    )
    (only,) = result.values()
    only.to("rest")
    assert run(builder, props, [("1", "x"), ("2", "y")], outputs=("xs", "rest")) == {
        "xs": [("1", "x")],
        "rest": [("2", "Y")],
    }


def test_merge_interleaves_both_inputs(props):
    builder = StreamsBuilder()
    builder.stream("a").merge(builder.stream("b")).to("out")
    with TopologyTestDriver(builder.build(), props) as driver:
        a, b = driver.create_input_topic("a", S, S), driver.create_input_topic("b", S, S)
        a.pipe_input("1", "a1")
        b.pipe_input("2", "b1")
        a.pipe_input("3", "a2")
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["a1", "b1", "a2"]


def test_to_with_topic_extractor_and_produced_serdes(props):
    builder = StreamsBuilder()
    builder.stream("in").map_values(len).to(
        lambda k, v, record: f"len-{v}", Produced.with_(S, Serdes.Integer())
    )
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("a", "xy")
        source.pipe_input("b", "xyz")
        assert driver.create_output_topic("len-2", S, Serdes.Integer()).read_key_value() == ("a", 2)
        assert driver.create_output_topic("len-3", S, Serdes.Integer()).read_key_value() == ("b", 3)


def test_null_keys_flow_through_stateless_operators(props):
    builder = StreamsBuilder()
    builder.stream("in").map_values(str.upper).to("out")
    assert run(builder, props, [(None, "v")]) == [(None, "V")]


def test_timestamps_and_headers_are_kept(props):
    builder = StreamsBuilder()
    builder.stream("in").map_values(str.upper).to("out")
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("in", S, S).pipe_record(TestRecord("k", "v", 1234, (("h", b"1"),)))
        record = driver.create_output_topic("out", S, S).read_record()
    assert record == TestRecord("k", "V", 1234, (("h", b"1"),))


def test_repartition_goes_through_an_internal_topic(props):
    builder = StreamsBuilder()
    builder.stream("in").select_key(lambda k, v: v).repartition(Repartitioned.as_("by-value")).to("out")
    topology = builder.build()
    assert len(topology.describe().subtopologies) == 2
    with TopologyTestDriver(topology, props) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v")
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("v", "v")]
        assert driver.producer_records("app-by-value-repartition") == [(b"v", b"v", 0)]


def test_mapper_returning_no_pair_is_a_clear_error(props):
    builder = StreamsBuilder()
    builder.stream("in").map(lambda k, v: v).to("out")
    with TopologyTestDriver(builder.build(), props) as driver, pytest.raises(ProcessingError, match="pair"):
        driver.create_input_topic("in", S, S).pipe_input("k", "value")


def test_user_exception_names_the_record(props):
    """A stateless chain makes no record context per record; the error still names the failing one."""
    builder = StreamsBuilder()
    builder.stream("in").filter(lambda k, v: True).map_values(lambda v: 1 / 0 if v == "bad" else v).to("out")
    expected = r"topic=in, partition=0, offset=2.*ZeroDivisionError"
    with (TopologyTestDriver(builder.build(), props) as driver,
          pytest.raises(ProcessingError, match=expected) as e):
        driver.create_input_topic("in", S, S).pipe_record_list([("k", "a"), ("k", "b"), ("k", "bad")])
    line = test_user_exception_names_the_record.__code__.co_firstlineno + 3  # the lambda's line
    assert f"(raised at {__file__}:{line}, in <lambda>)" in str(e.value)  # the user's frame, not strom's


def test_function_with_wrong_arity_is_rejected_when_building():
    with pytest.raises(TopologyError, match="takes 3 arguments"):
        StreamsBuilder().stream("in").map_values(lambda a, b, c: a)


def test_repartition_drops_records_whose_new_key_is_null(props):
    builder = StreamsBuilder()
    builder.stream("in").select_key(lambda k, v: None if v == "drop" else v).repartition().to("out")
    assert run(builder, props, [("a", "keep"), ("b", "drop")]) == [("keep", "keep")]


def test_process_with_a_store_added_to_the_builder(props):
    from strom.streams import Processor, Record, Stores

    class Dedupe(Processor):
        def init(self, context):
            self.context = context
            self.seen = context.get_state_store("seen")

        def process(self, record: Record) -> None:
            if self.seen.get(record.value) is None:
                self.seen.put(record.value, record.key)
                self.context.forward(record.with_key(record.value))

    builder = StreamsBuilder()
    builder.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("seen"), S, S))
    builder.stream("in").process(Dedupe, "seen").to("out")
    assert run(builder, props, [("1", "x"), ("2", "y"), ("3", "x")]) == [("x", "x"), ("y", "y")]


def test_a_finished_split_cannot_take_more_branches():
    split = StreamsBuilder().stream("in").split()
    split.branch(lambda k, v: True)
    split.no_default_branch()
    with pytest.raises(TopologyError, match="already finished"):
        split.branch(lambda k, v: False)


def test_consumed_and_produced_names_name_the_nodes():
    builder = StreamsBuilder()
    builder.stream("in", Consumed.as_("orders-source")).to("out", Produced.as_("orders-sink"))
    (subtopology,) = builder.build().describe().subtopologies
    assert [node.name for node in subtopology.nodes] == ["orders-source", "orders-sink"]


def test_print_writes_a_labelled_line_per_record_to_stdout(props, capsys):
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.print(Printed.to_sys_out())
    stream.print(Printed.to_sys_out().with_label("upper").with_key_value_mapper(lambda k, v: v.upper()))
    run(builder, props, [("k1", "a"), (None, "b")], outputs=("unused",))
    assert capsys.readouterr().out.splitlines() == [
        "[KSTREAM-PRINTER-0000000001]: k1, a", "[upper]: A",
        "[KSTREAM-PRINTER-0000000001]: None, b", "[upper]: B"]


def test_print_to_file_empties_it_when_built_and_appends_each_record(props, tmp_path):
    path = tmp_path / "printed.txt"
    path.write_text("left from an earlier run\n")
    builder = StreamsBuilder()
    builder.stream("in").print(Printed.to_file(path).with_name("debug"))
    assert path.read_text() == ""
    topology = builder.build()
    assert "Processor: debug" in str(topology.describe())
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k1", "a")
        assert path.read_text() == "[debug]: k1, a\n"  # written at once, not at commit or close
        source.pipe_input("k2", "b")
    assert path.read_text() == "[debug]: k1, a\n[debug]: k2, b\n"


def test_print_rejects_an_unwritable_file_and_a_mapper_of_one_argument(tmp_path):
    with pytest.raises(TopologyError, match="cannot write to"):
        Printed.to_file(tmp_path / "missing-dir" / "out.txt")
    with pytest.raises(TopologyError, match="empty"):
        Printed.to_file("")
    with pytest.raises(TopologyError, match=r"must take \(key, value\)"):
        StreamsBuilder().stream("in").print(Printed.to_sys_out().with_key_value_mapper(lambda v: v))
