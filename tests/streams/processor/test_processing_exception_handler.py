"""processing.exception.handler (Kafka's KIP-1033): a processor's exception fails the task (default)
or skips the record at that processor, counted in dropped_records, while its siblings still get it."""

from __future__ import annotations

import logging

import pytest

from strom.errors import ConfigError, ProcessingError
from strom.kafka.serdes import Serdes
from strom.streams import Materialized, Produced, StreamsBuilder, TopologyTestDriver
from strom.streams.errors import HandlerResponse

S, L = Serdes.String(), Serdes.Long()
CONTINUE = {"processing.exception.handler": "LogAndContinueProcessingExceptionHandler"}


def strict_upper(value: str) -> str:
    if value == "bad":
        raise ValueError("cannot upper-case 'bad'")
    return value.upper()


def branching(builder: StreamsBuilder, seen: list[str]) -> None:
    stream = builder.stream("in")
    stream.map_values(strict_upper).to("out")
    stream.foreach(lambda k, v: seen.append(v))  # a sibling after the failing branch


def test_log_and_continue_skips_the_record_at_the_failing_processor_only(props, caplog):
    seen: list[str] = []
    builder = StreamsBuilder()
    branching(builder, seen)
    with TopologyTestDriver(builder.build(), {**props, **CONTINUE}) as driver:
        source = driver.create_input_topic("in", S, S)
        for value in ("a", "bad", "c"):
            source.pipe_input("k", value)
        out = driver.create_output_topic("out", S, S).read_values_to_list()
        assert driver.metrics["dropped_records"] == 1
    assert out == ["A", "C"]
    assert seen == ["a", "bad", "c"]
    warning = next(r for r in caplog.records if r.levelno == logging.WARNING and "Skipping" in r.message)
    assert "in-0@1" in warning.message and "KSTREAM-MAPVALUES-0000000001" in warning.message
    assert "cannot upper-case" in warning.message


def test_the_default_fails_the_task_naming_the_record_and_the_handler_to_set(props):
    builder = StreamsBuilder()
    branching(builder, [])
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "a")
        with pytest.raises(ProcessingError, match=r"offset=1.*cannot upper-case.*LogAndContinueProcessing"):
            source.pipe_input("k", "bad")


class Recording:
    """Skips ValueErrors, fails on anything else; remembers what it was told."""

    def __init__(self) -> None:
        self.calls = []

    def handle(self, context, record, exception):
        self.calls.append((context, record.value, type(exception).__name__))
        return HandlerResponse.CONTINUE if isinstance(exception, ValueError) else HandlerResponse.FAIL


def test_a_custom_handler_gets_the_records_metadata_and_may_fail_the_task(props):
    handler = Recording()
    builder = StreamsBuilder()
    builder.stream("in").map_values(lambda v: strict_upper(v) + {"x": "!"}[v[-1]]).to("out")
    with TopologyTestDriver(builder.build(), {**props, "processing.exception.handler": handler}) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k1", "bad", timestamp=7)
        source.pipe_input("k2", "ax")
        failure = r"processor=KSTREAM-MAPVALUES-0000000001.*offset=2.*KeyError"
        with pytest.raises(ProcessingError, match=failure):
            source.pipe_input("k3", "ay")
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["AX!"]
    context, value, error = handler.calls[0]
    assert (context.topic, context.partition, context.offset, context.timestamp) == ("in", 0, 0, 7)
    assert (context.processor_node_id, context.task_id, value, error) == (
        "KSTREAM-MAPVALUES-0000000001", "0_0", "bad", "ValueError")
    assert [call[2] for call in handler.calls] == ["ValueError", "KeyError"]


def test_a_handler_answering_neither_continue_nor_fail_fails_the_task(props):
    class Confused:
        def handle(self, context, record, exception):
            return "continue"

    builder = StreamsBuilder()
    branching(builder, [])
    with (TopologyTestDriver(builder.build(), {**props, "processing.exception.handler": Confused}) as driver,
          pytest.raises(ProcessingError, match="not a HandlerResponse")):
        driver.create_input_topic("in", S, S).pipe_input("k", "bad")


def test_an_unknown_handler_name_is_a_config_error(props):
    builder = StreamsBuilder()
    branching(builder, [])
    with pytest.raises(ConfigError, match=r"processing\.exception\.handler"):
        TopologyTestDriver(builder.build(), {**props, "processing.exception.handler": "SkipEverything"})


@pytest.mark.parametrize("caching", [True, False])
def test_continue_in_an_aggregation_and_downstream_of_a_cache_flush(props, caching):
    def add(key, value, total):
        return total + int(value)  # "x" raises ValueError: the store keeps the old total

    def no_thirteen(total):
        if total == 13:
            raise ValueError("13 is unlucky")
        return total

    materialized = Materialized.as_("totals").with_value_serde(L)
    builder = StreamsBuilder()
    (builder.stream("in").group_by_key()
     .aggregate(lambda: 0, add, materialized if caching else materialized.with_caching_disabled())
     .to_stream().map_values(no_thirteen).to("out", Produced.with_(S, L)))
    with TopologyTestDriver(builder.build(), {**props, **CONTINUE}) as driver:
        source = driver.create_input_topic("in", S, S)
        for value in ("10", "x", "3", "4"):
            source.pipe_input("k", value)
        assert driver.get_key_value_store("totals").get("k") == 17
        assert driver.create_output_topic("out", S, L).read_values_to_list() == [10, 17]
        assert driver.metrics["dropped_records"] == 2  # "x" in the aggregator, 13 downstream
