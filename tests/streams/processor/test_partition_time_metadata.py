"""Partition time in committed-offset metadata, in Kafka Streams' TopicPartitionMetadata format: the
encoding, and a task initialized from it resuming the stream time of the task that committed it."""

from __future__ import annotations

import base64
import struct

import pytest

from strom.errors import ProcessingError
from strom.streams import StreamsBuilder
from strom.streams.processor import TopicPartition
from strom.streams.processor.internals.partition_group import (
    UNKNOWN,
    decode_commit_metadata,
    encode_partition_time,
)

from .test_stream_task import ListSink, make_task, raw

A, B = TopicPartition("a", 1), TopicPartition("b", 1)


def test_encoding_is_kafka_streams_version_2_without_processor_metadata():
    # version byte 2, then 1234 as a big-endian long, base64: what Kafka Streams commits for time 1234
    assert encode_partition_time(1234) == "AgAAAAAAAATS"
    assert decode_commit_metadata("AgAAAAAAAATS")[0] == 1234
    for time in (UNKNOWN, 0, 1_700_000_000_000, (1 << 63) - 1):
        assert decode_commit_metadata(encode_partition_time(time))[0] == time


def test_decoding_accepts_version_1_and_processor_metadata_after_the_time():
    assert decode_commit_metadata("AQAAAAAAAABj")[0] == 99  # version 1: the time only
    with_processor_metadata = struct.pack(">bqii", 2, 77, 1, 3) + b"key" + struct.pack(">q", 5)
    assert decode_commit_metadata(base64.b64encode(with_processor_metadata).decode())[0] == 77


def test_processor_metadata_round_trips_in_kafka_streams_layout():
    encoded = encode_partition_time(77, {"key": 5, "window-store": -3})
    raw = base64.b64decode(encoded)
    assert raw[:28] == struct.pack(">bqii", 2, 77, 2, 3) + b"key" + struct.pack(">q", 5)
    assert decode_commit_metadata(encoded) == (77, {"key": 5, "window-store": -3})
    assert decode_commit_metadata(encode_partition_time(77)) == (77, {})
    assert decode_commit_metadata(encoded[:-4]) == (UNKNOWN, {})  # cut short: not trusted


@pytest.mark.parametrize("metadata", [None, "", "not base64!", "AA==",
                                      base64.b64encode(b"\x09" + bytes(8)).decode()])
def test_missing_or_foreign_metadata_is_an_unknown_time(metadata):
    assert decode_commit_metadata(metadata)[0] == UNKNOWN


def _task(tmp_path, **overrides):
    builder = StreamsBuilder()
    builder.stream(["a", "b"]).to("out")
    sink = ListSink()
    return make_task(builder.build(), tmp_path, sink, **overrides), sink


def test_committable_offsets_carry_each_partition_time(tmp_path):
    task, _ = _task(tmp_path)
    task.add_records(A, [raw("a", 0, 10, b"k", b"a0"), raw("a", 1, 30, b"k", b"a1")])
    task.add_records(B, [raw("b", 5, 20, b"k", b"b0")])
    task.process_all()
    task.prepare_commit()
    assert task.committable_offsets_and_metadata() == {
        A: (2, encode_partition_time(30)),
        B: (6, encode_partition_time(20)),
    }
    assert {tp: offset for tp, (offset, _) in task.committable_offsets_and_metadata().items()} \
        == task.committable_offsets()
    task.close()


def test_a_task_initialized_from_committed_metadata_resumes_stream_and_partition_time(tmp_path):
    first, _ = _task(tmp_path / "first")
    first.add_records(A, [raw("a", 0, 500, b"k", b"a0")])
    first.add_records(B, [raw("b", 0, 200, b"k", b"b0")])
    first.process_all()
    first.commit()
    committed = {tp: metadata for tp, (_, metadata) in first.committable_offsets_and_metadata().items()}
    first.close()

    # the reopened task: a record without a valid timestamp takes its partition's restored time
    second, sink = _task(tmp_path / "second",
                         **{"default.timestamp.extractor": "UsePartitionTimeOnInvalidTimestamp"})
    second.initialize_task_time(committed)
    assert second.stream_time == 500
    second.add_records(B, [raw("b", 1, -1, b"k", b"b1")])
    second.process_all()
    assert sink.sent == [("out", b"k", b"b1", 200)]
    assert second.commit_metadata(B) == encode_partition_time(200)
    second.close()


def test_a_fresh_task_starts_at_unknown_time_and_foreign_partitions_are_refused(tmp_path):
    task, _ = _task(tmp_path)
    task.initialize_task_time({A: None, B: "garbage"})
    assert task.stream_time == UNKNOWN
    assert task.commit_metadata(A) == encode_partition_time(UNKNOWN)
    with pytest.raises(ProcessingError, match="does not own partition"):
        task.initialize_task_time({TopicPartition("c", 1): encode_partition_time(5)})
    task.close()
