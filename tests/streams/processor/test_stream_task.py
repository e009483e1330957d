"""StreamTask driven directly, as the Spark runtime drives it: records fed per partition, processed by
timestamp, error handlers, the two-step commit with its flush hook, and abort."""

from __future__ import annotations

import pytest

from strom.errors import ProcessingError, SerializationError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    FixedKeyProcessor,
    Materialized,
    Processor,
    StreamsBuilder,
    StreamsConfig,
    Topology,
)
from strom.streams.processor import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.internals.task import StreamTask
from strom.streams.state.cache import ThreadCache

S, L = Serdes.String(), Serdes.Long()


class ListSink:
    """A RecordSink keeping what was sent, with offsets per partition, delivering on flush."""

    def __init__(self, fail_topic: str | None = None) -> None:
        self.sent: list[tuple[str, bytes | None, bytes | None, int]] = []
        self.pending: list[tuple[str, int, bytes | None, bytes | None]] = []
        self.offsets: dict[tuple[str, int], int] = {}
        self.fail_topic = fail_topic

    def send(self, collector, topic, partition, key, value, timestamp, headers):
        self.pending.append((topic, partition or 0, key, value))
        self.sent.append((topic, key, value, timestamp))

    def flush(self, collector):
        for topic, partition, key, value in self.pending:
            if topic == self.fail_topic:
                collector.send_failed(topic, key, value, RuntimeError("broker said no"))
                continue
            offset = self.offsets.get((topic, partition), -1) + 1
            self.offsets[(topic, partition)] = offset
            collector.delivered(topic, partition, offset)
        self.pending.clear()


def make_task(topology: Topology, tmp_path, sink, partitions=None, **overrides) -> StreamTask:
    config = StreamsConfig(
        {
            "application.id": "app",
            "state.dir": str(tmp_path),
            "default.key.serde": "String",
            "default.value.serde": "String",
            **overrides,
        }
    )
    task = StreamTask(
        TaskId(0, 1), topology.internal, config, sink, ThreadCache(1 << 20), partitions=partitions
    )
    task.initialize()
    task.complete_restoration()
    return task


def raw(topic, offset, timestamp, key, value, partition=1):
    return ConsumerRecord(topic, partition, offset, timestamp, key, value)


def test_next_record_is_the_smallest_timestamp_across_partitions(tmp_path):
    builder = StreamsBuilder()
    builder.stream(["a", "b"]).to("out")
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink)
    assert set(task.partitions) == {TopicPartition("a", 1), TopicPartition("b", 1)}
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 10, b"k", b"a0"), raw("a", 1, 30, b"k", b"a1")])
    task.add_records(TopicPartition("b", 1), [raw("b", 0, 20, b"k", b"b0"), raw("b", 1, 40, b"k", b"b1")])
    assert task.process_all() == 4
    assert [value for _, _, value, _ in sink.sent] == [b"a0", b"b0", b"a1", b"b1"]
    assert task.stream_time == 40
    assert task.prepare_commit() == {TopicPartition("a", 1): 2, TopicPartition("b", 1): 2}
    task.post_commit()
    task.close()


def test_of_equal_timestamps_the_partition_waiting_longest_goes_first(tmp_path):
    """As Kafka's PartitionGroup queue: "b" filled first goes before "a"; a partition taken from rejoins
    behind the others waiting with the same timestamp."""
    builder = StreamsBuilder()
    builder.stream(["a", "b"]).to("out")
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink)
    task.add_records(TopicPartition("b", 1), [raw("b", 0, 10, b"k", b"b0"), raw("b", 1, 10, b"k", b"b1")])
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 10, b"k", b"a0"), raw("a", 1, 10, b"k", b"a1")])
    while task.process():
        pass
    assert [value for _, _, value, _ in sink.sent] == [b"b0", b"a0", b"b1", b"a1"]
    task.close()


def test_records_of_a_partition_not_owned_are_rejected(tmp_path):
    builder = StreamsBuilder()
    builder.stream("a").to("out")
    task = make_task(builder.build(), tmp_path, ListSink())
    with pytest.raises(ProcessingError, match="does not own partition a-0"):
        task.add_records(TopicPartition("a", 0), [])


def test_log_and_continue_skips_undeserializable_records_and_counts_them(tmp_path):
    builder = StreamsBuilder()
    builder.stream("a", Consumed.with_(S, L)).map_values(lambda v: v + 1).to("out")
    sink = ListSink()
    task = make_task(
        builder.build(),
        tmp_path,
        sink,
        **{
            "default.deserialization.exception.handler": "LogAndContinueExceptionHandler",
            "default.value.serde": "Long",
        },
    )
    task.add_records(
        TopicPartition("a", 1), [raw("a", 0, 1, b"k", b"bad"), raw("a", 1, 2, b"k", L.serialize("a", 7))]
    )
    assert task.process_all() == 2
    assert task.metrics.dropped_records == 1
    assert [L.deserialize("out", v) for _, _, v, _ in sink.sent] == [8]
    assert task.prepare_commit() == {TopicPartition("a", 1): 2}  # the skipped record is consumed too


def test_log_and_fail_is_the_default(tmp_path):
    builder = StreamsBuilder()
    builder.stream("a", Consumed.with_(S, L)).to("out")
    task = make_task(builder.build(), tmp_path, ListSink(), **{"default.value.serde": "Long"})
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 1, b"k", b"bad")])
    with pytest.raises(SerializationError, match="LogAndContinueExceptionHandler"):
        task.process()


def test_production_errors_fail_the_commit_unless_handled(tmp_path):
    builder = StreamsBuilder()
    builder.stream("a").to("out")
    task = make_task(builder.build(), tmp_path, ListSink(fail_topic="out"))
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 1, b"k", b"v")])
    task.process_all()
    with pytest.raises(ProcessingError, match="broker said no"):
        task.prepare_commit()

    builder = StreamsBuilder()
    builder.stream("a").to("out")
    task = make_task(
        builder.build(),
        tmp_path / "2",
        ListSink(fail_topic="out"),
        **{"default.production.exception.handler": "LogAndContinueProductionExceptionHandler"},
    )
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 1, b"k", b"v")])
    task.process_all()
    assert task.prepare_commit() == {TopicPartition("a", 1): 1}
    assert task.collector.dropped_records == 1


def test_flush_hook_runs_before_caches_and_abort_drops_uncommitted_writes(tmp_path):
    events = []

    class Buffering(FixedKeyProcessor):
        """Holds records until flush(), like a concurrent step finishing its in-flight work."""

        def init(self, context):
            self.context = context
            self.held = []

        def process(self, record):
            self.held.append(record)

        def flush(self):
            events.append(("flush", len(self.held)))
            for record in self.held:
                self.context.forward(record)
            self.held.clear()

    builder = StreamsBuilder()
    (
        builder.stream("a")
        .process_values(Buffering)
        .group_by_key()
        .count(materialized=Materialized.as_("c"))
        .to_stream()
        .peek(lambda k, v: events.append(("emit", k, v)))
        .to("out")
    )
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink, **{"default.value.serde": "String"})
    store = task.context.stores["c"]
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 1, b"k", b"x"), raw("a", 1, 2, b"k", b"y")])
    task.process_all()
    assert events == []
    offsets = task.prepare_commit()
    assert events == [("flush", 2), ("emit", "k", 2)]
    assert offsets == {TopicPartition("a", 1): 2}
    task.post_commit()
    assert store.get("k").value == 2
    assert task.changelog_offsets() == {"c": 1}

    task.add_records(TopicPartition("a", 1), [raw("a", 2, 3, b"k", b"z")])
    task.process_all()
    task.prepare_commit()
    assert store.get("k").value == 3
    task.abort()  # the transaction failed: back to the last commit
    assert store.get("k").value == 2
    task.close()


def test_wall_clock_punctuation_is_driven_by_the_caller(tmp_path):
    fired = []

    class Ticker(Processor):
        def init(self, context):
            from strom.streams import PunctuationType

            context.schedule(100, PunctuationType.WALL_CLOCK_TIME, fired.append)

        def process(self, record):
            pass

    topology = Topology().add_source("s", "a").add_processor("p", Ticker, "s")
    clock = [1_000]
    config = StreamsConfig(
        {
            "application.id": "app",
            "state.dir": str(tmp_path),
            "default.key.serde": "String",
            "default.value.serde": "String",
        }
    )
    task = StreamTask(
        TaskId(0, 0), topology.internal, config, ListSink(), ThreadCache(0), system_time=lambda: clock[0]
    )
    task.initialize()
    task.complete_restoration()
    assert not task.maybe_punctuate_system_time()
    clock[0] = 1_250
    assert task.maybe_punctuate_system_time()
    assert fired == [1_250]
    assert task.maybe_punctuate_system_time(1_300)
    assert fired == [1_250, 1_300]


def test_negative_timestamps_fail_by_default_and_can_be_skipped(tmp_path):
    builder = StreamsBuilder()
    builder.stream("a").to("out")
    task = make_task(builder.build(), tmp_path, ListSink())
    task.add_records(TopicPartition("a", 1), [raw("a", 0, -5, b"k", b"v")])
    with pytest.raises(ProcessingError, match="invalid timestamp -5"):
        task.process()

    builder = StreamsBuilder()
    builder.stream("a").to("out")
    sink = ListSink()
    task = make_task(
        builder.build(),
        tmp_path / "2",
        sink,
        **{"default.timestamp.extractor": "LogAndSkipOnInvalidTimestamp"},
    )
    task.add_records(TopicPartition("a", 1), [raw("a", 0, -5, b"k", b"bad"), raw("a", 1, 7, b"k", b"ok")])
    task.process_all()
    assert [value for _, _, value, _ in sink.sent] == [b"ok"]
    assert task.metrics.dropped_records == 1


def test_consumed_timestamp_extractor_sets_record_time(tmp_path):
    class FromValue:
        def extract(self, record, partition_time):
            return int(record.value)

    builder = StreamsBuilder()
    builder.stream("a", Consumed.with_(timestamp_extractor=FromValue())).to("out")
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink)
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 1, b"k", b"1000"), raw("a", 1, 2, b"k", b"500")])
    task.process_all()
    assert [ts for _, _, _, ts in sink.sent] == [1000, 500]
    assert task.stream_time == 1000


def test_error_downstream_of_a_cache_flush_names_the_commit(tmp_path):
    def explode(key, value):
        raise ValueError("downstream broke")

    builder = StreamsBuilder()
    builder.stream("a").group_by_key().count(materialized=Materialized.as_("c")).to_stream().foreach(explode)
    task = make_task(builder.build(), tmp_path, ListSink())
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 1, b"k", b"v")])
    task.process_all()  # the count sits in the cache
    with pytest.raises(ProcessingError, match="flushing task 0_1 for a commit: ValueError: downstream broke"):
        task.prepare_commit()


def test_produced_partitioner_chooses_the_output_partition(tmp_path):
    from strom.streams import Produced

    class PartitionSink(ListSink):
        def send(self, collector, topic, partition, key, value, timestamp, headers):
            self.sent.append((topic, partition, value, timestamp))

    builder = StreamsBuilder()
    builder.stream("a").to("out", Produced.with_(partitioner=lambda topic, key, value: len(value)))
    sink = PartitionSink()
    task = make_task(builder.build(), tmp_path, sink)
    task.add_records(TopicPartition("a", 1), [raw("a", 0, 1, b"k", b"xyz"), raw("a", 1, 2, b"k", b"x")])
    task.process_all()
    assert [(topic, partition) for topic, partition, _, _ in sink.sent] == [("out", 3), ("out", 1)]


def test_stream_partitioner_multicasts_drops_or_defers_kip_837(tmp_path):
    from strom.streams import Produced, StreamPartitioner

    class CountingSink(ListSink):
        def send(self, collector, topic, partition, key, value, timestamp, headers):
            self.sent.append((topic, partition, value, timestamp))

        def partition_count(self, topic):
            return 4

    class ByValue(StreamPartitioner):
        """"all": every partition; "none": dropped; "default": the default partitioner; else one."""

        def partitions(self, topic, key, value, num_partitions):
            if value == "all":
                return set(range(num_partitions))
            if value == "none":
                return set()
            return None if value == "default" else {int(value) % num_partitions}

    class Legacy(StreamPartitioner):
        def partition(self, topic, key, value, num_partitions):
            return num_partitions - 1

    builder = StreamsBuilder()
    source = builder.stream("a", Consumed.with_(S, S))
    source.to("multi", Produced.with_(S, S, ByValue()))
    source.to("legacy", Produced.with_(S, S).with_stream_partitioner(Legacy()))
    source.to("counted", Produced.with_(S, S, lambda topic, key, value, n: n - 2))
    sink = CountingSink()
    task = make_task(builder.build(), tmp_path, sink)
    task.add_records(TopicPartition("a", 1), [raw("a", o, o, b"k", v) for o, v in
                                              enumerate([b"all", b"none", b"default", b"6"])])
    task.process_all()
    multi = [(partition, value) for topic, partition, value, _ in sink.sent if topic == "multi"]
    assert multi == [(0, b"all"), (1, b"all"), (2, b"all"), (3, b"all"), (None, b"default"), (2, b"6")]
    assert {partition for topic, partition, _, _ in sink.sent if topic == "legacy"} == {3}
    assert {partition for topic, partition, _, _ in sink.sent if topic == "counted"} == {2}
