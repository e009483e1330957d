"""The Processor API: processors with stores, punctuation by stream and wall-clock time, commit requests."""

from __future__ import annotations

import pytest

from strom.errors import ProcessingError, TopologyError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Processor,
    PunctuationType,
    Record,
    Stores,
    StreamsBuilder,
    Topology,
    TopologyTestDriver,
)

S, L = Serdes.String(), Serdes.Long()


class CountingProcessor(Processor):
    """Counts per key in a store and emits all counts on punctuation."""

    def __init__(self, punctuation_type: PunctuationType) -> None:
        self.punctuation_type = punctuation_type
        self.punctuations: list[int] = []

    def init(self, context):
        self.context = context
        self.store = context.get_state_store("counts")
        context.schedule(10, self.punctuation_type, self.punctuate)

    def process(self, record: Record) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)

    def punctuate(self, timestamp: int) -> None:
        self.punctuations.append(timestamp)
        for key, count in self.store.all():
            self.context.forward(Record(key, count, timestamp))


def counting_topology(processor: CountingProcessor) -> Topology:
    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("counts"), S, L)
    return (
        Topology()
        .add_source("source", "in", key_serde=S, value_serde=S)
        .add_processor("count", lambda: processor, "source")
        .add_state_store(store, "count")
        .add_sink("sink", "out", "count", key_serde=S, value_serde=L)
    )


def test_stream_time_punctuation_fires_as_records_advance_time(props):
    processor = CountingProcessor(PunctuationType.STREAM_TIME)
    with TopologyTestDriver(counting_topology(processor), props) as driver:
        source = driver.create_input_topic("in", S, S)
        output = driver.create_output_topic("out", S, L)
        source.pipe_input("a", "x", timestamp=0)
        assert processor.punctuations == [0]
        assert output.read_key_values_to_list() == [("a", 1)]
        source.pipe_input("a", "x", timestamp=5)
        source.pipe_input("b", "x", timestamp=3)  # out of order: stream time stays 5
        assert processor.punctuations == [0]
        source.pipe_input("a", "x", timestamp=37)  # skips missed periods: one punctuation at 37
        assert processor.punctuations == [0, 37]
        assert output.read_records_to_list()[0].timestamp == 37
        source.pipe_input("a", "x", timestamp=40)
        assert processor.punctuations == [0, 37, 40]


def test_wall_clock_punctuation_follows_the_driver_clock(props):
    processor = CountingProcessor(PunctuationType.WALL_CLOCK_TIME)
    with TopologyTestDriver(counting_topology(processor), props, initial_wall_clock_time=1000) as driver:
        driver.create_input_topic("in", S, S).pipe_input("a", "x")
        assert processor.punctuations == []
        driver.advance_wall_clock_time(9)
        assert processor.punctuations == []
        driver.advance_wall_clock_time(1)
        assert processor.punctuations == [1010]
        assert driver.create_output_topic("out", S, L).read_key_value() == ("a", 1)


class Router(Processor):
    def process(self, record: Record) -> None:
        self.context.forward(record, "even" if int(record.value) % 2 == 0 else "odd")
        if record.value == "commit":
            self.context.commit()


def test_forward_to_named_child_and_record_metadata(props):
    seen = []

    class Meta(Processor):
        def process(self, record):
            meta = self.context.record_metadata()
            seen.append((meta.topic, meta.partition, meta.offset, self.context.task_id))
            self.context.forward(record)

    topology = (
        Topology()
        .add_source("source", "in", key_serde=S, value_serde=S)
        .add_processor("meta", Meta, "source")
        .add_processor("router", Router, "meta")
        .add_sink("even", "evens", "router")
        .add_sink("odd", "odds", "router")
    )
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        for value in ["1", "2", "3"]:
            source.pipe_input("k", value)
        assert driver.create_output_topic("evens", S, S).read_values_to_list() == ["2"]
        assert driver.create_output_topic("odds", S, S).read_values_to_list() == ["1", "3"]
    assert seen == [("in", 0, 0, "0_0"), ("in", 0, 1, "0_0"), ("in", 0, 2, "0_0")]


def test_processor_after_stateless_operators_sees_each_records_metadata(props):
    """Stateless DSL operators make no record context; a Processor API processor in the same task
    still sees the metadata of every record (the task makes one per record again)."""
    seen = []

    class Meta(Processor):
        def process(self, record):
            meta = self.context.record_metadata()
            seen.append((meta.topic, meta.offset, record.value))

    builder = StreamsBuilder()
    builder.stream("in").filter(lambda k, v: v != "skip").map_values(str.upper).process(Meta)
    with TopologyTestDriver(builder.build(), {**props, "default.key.serde": "String",
                                              "default.value.serde": "String"}) as driver:
        driver.create_input_topic("in", S, S).pipe_record_list([("k", "a"), ("k", "skip"), ("k", "c")])
    assert seen == [("in", 0, "A"), ("in", 2, "C")]


def test_forward_to_unknown_child_is_a_topology_error(props):
    class Bad(Processor):
        def process(self, record):
            self.context.forward(record, "nope")

    topology = Topology().add_source("s", "in").add_processor("p", Bad, "s").add_sink("k", "out", "p")
    with (
        TopologyTestDriver(topology, props) as driver,
        pytest.raises(TopologyError, match="no child named 'nope'"),
    ):
        driver.create_input_topic("in", S, S).pipe_input("k", "v")


def test_store_not_connected_is_not_reachable(props):
    class Sneaky(Processor):
        def init(self, context):
            context.get_state_store("counts")

    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("counts"), S, L)
    topology = (
        Topology()
        .add_source("s", "in")
        .add_processor("p", Sneaky, "s")
        .add_processor("owner", Sneaky, "s")
        .add_state_store(store, "owner")
    )
    with pytest.raises(TopologyError, match="no access to state store 'counts'"):
        TopologyTestDriver(topology, props)


def test_context_commit_requests_a_commit(props):
    class Requester(Processor):
        def init(self, context):
            self.context = context
            self.store = context.get_state_store("s")

        def process(self, record):
            self.store.put(record.key, record.value)
            if record.value == "now":
                self.context.commit()

    store = Stores.key_value_store_builder(Stores.in_memory_key_value_store("s"), S, S).with_caching_enabled()
    topology = (
        Topology().add_source("src", "in").add_processor("p", Requester, "src").add_state_store(store, "p")
    )
    with TopologyTestDriver(topology, props, commit_per_record=False) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "later")
        assert driver.producer_records("app-s-changelog") == []
        source.pipe_input("k", "now")
        assert driver.producer_records("app-s-changelog") == [(b"k", b"now", 0)]


@pytest.mark.parametrize(
    "problem, match",
    [
        (lambda t: t.add_processor("p", Processor, "missing"), "Parent 'missing'"),
        (lambda t: t.add_source("s", "other"), "already exists"),
        (lambda t: t.add_source("s2", "in"), "already read by source"),
        (lambda t: t.add_processor("k2", Processor, "k"), "cannot have children"),
        (lambda t: t.add_processor("p", Processor(), "s"), "needs a supplier"),
    ],
)
def test_builder_rejects_invalid_wiring(problem, match):
    topology = Topology().add_source("s", "in").add_sink("k", "out", "s")
    with pytest.raises(TopologyError, match=match):
        problem(topology)


def test_driver_times_accept_datetimes_and_timedeltas(props):
    from datetime import UTC, datetime, timedelta

    processor = CountingProcessor(PunctuationType.WALL_CLOCK_TIME)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with TopologyTestDriver(counting_topology(processor), props, initial_wall_clock_time=start) as driver:
        driver.create_input_topic("in", S, S).pipe_input("a", "x", timestamp=start)
        driver.advance_wall_clock_time(timedelta(milliseconds=10))
        assert processor.punctuations == [int(start.timestamp() * 1000) + 10]
        record = driver.create_output_topic("out", S, L).read_record()
        assert record.timestamp == int(start.timestamp() * 1000) + 10


def test_processor_failing_in_init_is_named(props):
    class Broken(Processor):
        def init(self, context):
            raise RuntimeError("no config")

    topology = Topology().add_source("s", "in").add_processor("broken", Broken, "s")
    with pytest.raises(ProcessingError, match="Processor 'broken' of task 0_0 failed in init"):
        TopologyTestDriver(topology, props)


def test_produced_topic_names_include_changelogs(props):
    processor = CountingProcessor(PunctuationType.STREAM_TIME)
    with TopologyTestDriver(counting_topology(processor), props) as driver:
        driver.create_input_topic("in", S, S).pipe_input("a", "x")
        assert driver.produced_topic_names() == {"out", "app-counts-changelog"}
        assert list(driver.get_all_state_stores()) == ["counts"]


def test_advancing_the_clock_commits_what_a_punctuation_wrote(props):
    class Ticker(Processor):
        def init(self, context):
            self.store = context.get_state_store("ticks")
            context.schedule(5, PunctuationType.WALL_CLOCK_TIME, lambda ts: self.store.put("last", str(ts)))

        def process(self, record):
            pass

    store = Stores.key_value_store_builder(
        Stores.in_memory_key_value_store("ticks"), S, S
    ).with_caching_enabled()
    topology = Topology().add_source("s", "in").add_processor("t", Ticker, "s").add_state_store(store, "t")
    with TopologyTestDriver(topology, props) as driver:
        driver.advance_wall_clock_time(5)
        assert driver.producer_records("app-ticks-changelog") == [(b"last", b"5", 5)]


def test_schedule_takes_a_timedelta_and_rejects_bad_arguments(props):
    from datetime import timedelta

    fired = []

    class Scheduler(Processor):
        def init(self, context):
            context.schedule(timedelta(milliseconds=20), PunctuationType.STREAM_TIME, fired.append)
            with pytest.raises(TopologyError, match="at least 1 ms"):
                context.schedule(0, PunctuationType.STREAM_TIME, fired.append)
            with pytest.raises(TopologyError, match="Punctuation type"):
                context.schedule(5, "stream", fired.append)

        def process(self, record):
            pass

    topology = Topology().add_source("s", "in").add_processor("p", Scheduler, "s")
    with TopologyTestDriver(topology, props) as driver:
        source = driver.create_input_topic("in", S, S)
        for ts in (0, 19, 20, 45):
            source.pipe_input("k", "v", timestamp=ts)
    assert fired == [0, 20, 45]


def test_the_driver_s_stream_time_spans_every_subtopology_as_kafka_s_single_task_driver(props):
    """Kafka's TopologyTestDriver runs all subtopologies as one task: a record of any topic, a repartition
    topic's too, moves the stream time every STREAM_TIME punctuation follows. Here "b" records, read by
    another subtopology, fire the punctuation of the processor reading "a"."""
    fired: list[int] = []

    class Ticker(Processor):
        def init(self, context):
            context.schedule(10, PunctuationType.STREAM_TIME, fired.append)

        def process(self, record):
            pass

    topology = (Topology().add_source("sa", "a").add_processor("t", Ticker, "sa")
                .add_source("sb", "b").add_sink("out", "out", "sb"))
    with TopologyTestDriver(topology, props) as driver:
        driver.create_input_topic("a", S, S).pipe_input("k", "x", timestamp=1)
        assert fired == [1]
        driver.create_input_topic("b", S, S).pipe_input("k", "x", timestamp=25)
        assert fired == [1, 25]
