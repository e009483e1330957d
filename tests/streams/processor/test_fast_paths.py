"""The per-record fast paths (C-level string codecs, one-struct timestamped numbers, sinks serializing
themselves) must behave exactly as the serdes they stand in for: odd inputs go through the serdes'
own methods, and errors carry the serdes' messages."""

from __future__ import annotations

import pytest

from strom.errors import SerializationError
from strom.kafka.serdes import Serdes, StringSerde, decoder_of, encoder_of
from strom.streams import Consumed, Materialized, Produced, Stores, StreamsBuilder
from strom.streams.processor import ConsumerRecord, TopicPartition
from strom.streams.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde

from .test_stream_task import ListSink, make_task

S, L, D = Serdes.String(), Serdes.Long(), Serdes.Double()


class Shouting(StringSerde):
    """A subclass changing serialize: sinks must not bypass it with str.encode."""

    def serialize(self, topic, data, headers=None):
        return None if data is None else data.upper().encode()


def test_string_codecs_are_the_c_functions_only_for_plain_utf8_serdes():
    assert encoder_of(S, "t") is str.encode
    assert decoder_of(S, "t") is bytes.decode
    assert encoder_of(StringSerde("latin-1"), "t")("é") == "é".encode("latin-1")
    assert encoder_of(Shouting(), "t")("a") == b"A"


def test_odd_input_falls_back_to_the_serde(tmp_path):
    """A bytearray key (the C decoder refuses it) still deserializes; bad UTF-8 is reported by the serde."""
    builder = StreamsBuilder()
    builder.stream("a").to("out")
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink)
    task.add_records(TopicPartition("a", 1), [ConsumerRecord("a", 1, 0, 1, bytearray(b"k"), b"v")])
    task.process_all()
    assert sink.sent == [("out", b"k", b"v", 1)]
    task.add_records(TopicPartition("a", 1), [ConsumerRecord("a", 1, 1, 2, b"k", b"\xff")])
    with pytest.raises(SerializationError, match="String cannot deserialize"):
        task.process_all()


def test_bad_utf8_is_skipped_and_counted_with_log_and_continue(tmp_path):
    builder = StreamsBuilder()
    builder.stream("a").to("out")
    sink = ListSink()
    task = make_task(
        builder.build(), tmp_path, sink,
        **{"default.deserialization.exception.handler": "LogAndContinueExceptionHandler"},
    )
    task.add_records(
        TopicPartition("a", 1),
        [ConsumerRecord("a", 1, 0, 1, b"k", b"\xff"), ConsumerRecord("a", 1, 1, 2, None, b"ok")],
    )
    assert task.process_all() == 2
    assert task.metrics.dropped_records == 1
    assert sink.sent == [("out", None, b"ok", 2)]


def test_sinks_serialize_like_their_serdes(tmp_path):
    builder = StreamsBuilder()
    stream = builder.stream("a", Consumed.with_(S, S))
    stream.map_values(len).to("lengths", Produced.with_(S, S))
    stream.to("shouted", Produced.with_(S, Shouting()))
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink)
    task.add_records(TopicPartition("a", 1), [ConsumerRecord("a", 1, 0, 1, b"k", b"abc")])
    with pytest.raises(SerializationError, match="String cannot serialize int value 3 for topic 'lengths'"):
        task.process_all()

    builder = StreamsBuilder()
    builder.stream("a", Consumed.with_(S, S)).to("shouted", Produced.with_(S, Shouting()))
    sink = ListSink()
    task = make_task(builder.build(), tmp_path / "2", sink)
    task.add_records(TopicPartition("a", 1), [ConsumerRecord("a", 1, 0, 1, b"k", b"abc")])
    task.process_all()
    assert sink.sent == [("shouted", b"k", b"ABC", 1)]


@pytest.mark.parametrize("value_serde, value", [(L, 42), (D, 2.5), (D, 3), (S, "x")])
def test_timestamped_codecs_agree_with_the_serde(value_serde, value):
    serde = ValueAndTimestampSerde(value_serde)
    stored = ValueAndTimestamp(value, 1234)
    raw = serde.serialize("t", stored)
    assert encoder_of(serde, "t")(stored) == raw
    assert decoder_of(serde, "t")(raw) == serde.deserialize("t", raw) == (value, 1234)


@pytest.mark.parametrize("bad", [ValueAndTimestamp(True, 1), ValueAndTimestamp(1.5, 1), (7, 1)])
def test_timestamped_long_encoder_refuses_what_the_serde_refuses(bad):
    encode = encoder_of(ValueAndTimestampSerde(L), "t")
    with pytest.raises(TypeError):
        encode(bad)
    with pytest.raises(SerializationError):
        ValueAndTimestampSerde(L).serialize("t", bad)


@pytest.mark.parametrize("supplier", [Stores.in_memory_key_value_store, Stores.persistent_key_value_store])
def test_counts_in_a_store_fed_straight_from_the_source(tmp_path, supplier):
    """The aggregation reads the task's record context as set for the record: changelog timestamps."""
    builder = StreamsBuilder()
    builder.stream("a", Consumed.with_(S, S)).group_by_key().count(
        materialized=Materialized.as_(supplier("counts")).with_caching_disabled()
    )
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink)
    task.add_records(
        TopicPartition("a", 1),
        [ConsumerRecord("a", 1, i, 10 + i, b"k", b"v", (("h", b"1"),)) for i in range(3)],
    )
    task.process_all()
    changelog = [(topic, L.deserialize(topic, value), ts) for topic, _, value, ts in sink.sent]
    assert changelog == [("app-counts-changelog", n, 10 + n - 1) for n in (1, 2, 3)]
    assert task.context.stores["counts"].get("k") == (3, 12)


def test_long_interleaved_partitions_are_merged_by_timestamp_in_any_batch_size(tmp_path):
    """Runs of one partition end where the other's next record is older; taken records are dropped
    from the queues between runs (also past the compaction threshold), and records may arrive while
    others are still buffered."""
    builder = StreamsBuilder()
    builder.stream(["a", "b"], Consumed.with_(S, S)).to("out")
    sink = ListSink()
    task = make_task(builder.build(), tmp_path, sink)
    n = 3000

    def feed(topic: str, first: int, offsets: range) -> None:  # a: even timestamps, b: odd ones
        records = [ConsumerRecord(topic, 1, i, first + 2 * i, b"k", b"v") for i in offsets]
        task.add_records(TopicPartition(topic, 1), records)

    feed("a", 0, range(n // 2))
    feed("b", 1, range(n))
    assert task.process_batch(7) == 7
    taken = 7 + task.process_batch(1500)
    feed("a", 0, range(n // 2, n))
    while task.buffered:
        taken += task.process_batch(1000)
    assert taken == 2 * n
    assert [ts for _, _, _, ts in sink.sent] == list(range(2 * n))
    assert task.committable_offsets() == {TopicPartition("a", 1): n, TopicPartition("b", 1): n}
