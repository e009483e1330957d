"""Stateless chains fused into one function per source (processor/internals/fusion.py) give exactly what
the unfused nodes give: the same records in the same order, the same errors, the same fallbacks."""

from __future__ import annotations

import pytest

from strom.errors import ProcessingError, SerializationError
from strom.kafka.serdes import Serdes
from strom.streams import Materialized, Produced, SessionWindows, StreamsBuilder
from strom.streams.processor import ConsumerRecord, TopicPartition
from strom.streams.processor.internals.fusion import fuse

from .test_stream_task import ListSink, make_task

S, L = Serdes.String(), Serdes.Long()
INPUT = [("a", "1"), (None, "2"), ("b", "37"), ("c", "4"), ("a", "5"), ("d", "")]


def run(build, tmp_path, fused: bool = True, **overrides) -> tuple[list, object]:
    builder = StreamsBuilder()
    build(builder)
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink, **overrides)
    if not fused:
        for source in task.sources.values():
            source.chain = None
    partition = TopicPartition("in", 1)
    records = [ConsumerRecord("in", 1, i, 10 + i, None if k is None else k.encode(), v.encode())
               for i, (k, v) in enumerate(INPUT)]
    task.add_records(partition, records)
    task.process_all()
    return sink.sent, task.sources["in"].chain


def every_step(builder: StreamsBuilder) -> None:
    seen = []
    stream = (builder.stream("in")
              .filter(lambda k, v: v != "4")
              .filter_not(lambda k, v: v == "")
              .map_values(lambda v: v + "!")
              .map_values(lambda k, v: f"{k}:{v}")
              .peek(lambda k, v: seen.append(k))
              .select_key(lambda k, v: (k or "none").upper())
              .map(lambda k, v: (k + k, v)))
    stream.to("out")


def fan_out_then_count(builder: StreamsBuilder) -> None:
    stream = builder.stream("in").filter(lambda k, v: k is not None).map_values(str.upper)
    stream.to("copy")
    stream.group_by_key().count(materialized=Materialized.as_("counts").with_caching_disabled()).to_stream().to(
        "counts", Produced.with_(S, L))


@pytest.mark.parametrize("build", [every_step, fan_out_then_count])
def test_fused_chains_send_what_the_nodes_send(tmp_path, build):
    fused, chain = run(build, tmp_path / "fused")
    plain, _ = run(build, tmp_path / "plain", fused=False)
    assert chain is not None
    assert fused == plain and fused


def test_a_stateful_first_step_without_a_step_is_not_fused(tmp_path):
    """A session-windowed count gives no step (a KStream aggregation and a tumbling windowed one do:
    tests/streams/kstream/test_fused_aggregation.py)."""
    _, chain = run(lambda b: b.stream("in").group_by_key().windowed_by(
        SessionWindows.of_inactivity_gap_with_no_grace(10_000)).count(), tmp_path)
    assert chain is None


def test_a_failing_step_names_the_record(tmp_path):
    with pytest.raises(ProcessingError, match="offset=2"):
        run(lambda b: b.stream("in").map_values(lambda v: str(1 // (len(v) - 2))).to("out"), tmp_path)


def test_a_value_the_sink_cannot_encode_takes_the_sink_path(tmp_path):
    """map_values to an int with a String sink: the serializer reports it, as without fusion."""
    with pytest.raises(SerializationError):
        run(lambda b: b.stream("in").map_values(len).to("out"), tmp_path)


def test_a_processing_exception_handler_turns_fusion_off(tmp_path):
    sent, chain = run(lambda b: b.stream("in").map_values(lambda v: 1 // (len(v) - 2)).map_values(str)
                      .to("out"), tmp_path,
                      **{"processing.exception.handler": "LogAndContinueProcessingExceptionHandler"})
    assert chain is None
    assert [value for _, _, value, _ in sent] == [b"-1", b"-1", b"-1", b"-1", b"-1"]


def test_fuse_of_a_node_without_a_step_is_none():
    class Node:
        processor = object()
        entry = None
    assert fuse(Node()) is None


@pytest.mark.parametrize("left", [False, True])
def test_a_fused_stream_table_join_sends_what_the_join_node_sends(tmp_path, left):
    def build(builder: StreamsBuilder) -> None:
        table = builder.table("table")
        stream = builder.stream("in")
        joined = (stream.left_join if left else stream.join)(table, lambda value, other: f"{value}+{other}")
        joined.map_values(str.upper).to("out")

    sent = {}
    for fused in (True, False):
        builder = StreamsBuilder()
        build(builder)
        sink = ListSink()
        task = make_task(builder.build(), tmp_path / str(fused), sink,
                         partitions=[TopicPartition("table", 1), TopicPartition("in", 1)])
        if not fused:
            task.sources["in"].chain = None
        task.add_records(TopicPartition("table", 1), [ConsumerRecord("table", 1, 0, 0, b"a", b"x"),
                                                      ConsumerRecord("table", 1, 1, 0, b"c", b"y")])
        task.process_all()
        task.add_records(TopicPartition("in", 1), [
            ConsumerRecord("in", 1, i, 10 + i, None if k is None else k.encode(), v.encode())
            for i, (k, v) in enumerate(INPUT)])
        task.process_all()
        sent[fused] = (sink.sent, task.sources["in"].chain is not None)
    assert sent[True][1] and not sent[False][1]
    assert sent[True][0] == sent[False][0] and sent[True][0]


class Count(int):
    """An int subclass: a number serializer takes it through its full path, not its struct."""


NUMBERS = {  # INPUT's values -> what the step before the sink makes of them
    "Long": {"1": 7, "2": -2**63, "37": True, "4": 2**63, "5": Count(5), "": 1.5},
    "Integer": {"1": 2**31 - 1, "2": 2**31, "37": -3, "4": False, "5": Count(-5), "": "x"},
    "Double": {"1": 2, "2": 2.5, "37": True, "4": float("inf"), "5": Count(9), "": 10**400},
}


@pytest.mark.parametrize("serde", sorted(NUMBERS))
@pytest.mark.parametrize("side", ["key", "value"])
def test_a_fused_sink_packs_numbers_as_the_serializer_does(tmp_path, serde, side):
    """The fused sink packs a fixed-width number with the serde's struct inline (no call of the
    serializer); what it sends and what it drops as unserializable are what the unfused sink gives."""
    numbers = NUMBERS[serde].__getitem__
    number_serde = getattr(Serdes, serde)()
    produced = Produced.with_(number_serde, S) if side == "key" else Produced.with_(S, number_serde)

    def build(builder: StreamsBuilder) -> None:
        stream = builder.stream("in")
        stream = stream.map(lambda k, v: (numbers(v), v)) if side == "key" else stream.map_values(numbers)
        stream.to("out", produced)

    dropping = {"default.production.exception.handler": "LogAndContinueProductionExceptionHandler"}
    fused, chain = run(build, tmp_path / "fused", **dropping)
    plain, _ = run(build, tmp_path / "plain", fused=False, **dropping)
    assert chain is not None and any(name.endswith(f"{side}_pack") for name in chain.__globals__)
    assert fused == plain and 0 < len(fused) < len(INPUT)
