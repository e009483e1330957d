"""Produce and fetch as a client sees them: offsets, timestamps, headers, and refused batches."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, KafkaError
from fidelity_helpers import Peers, Target
from kio.schema.fetch.v4 import request as fetch
from kio.schema.metadata.v12 import request as metadata
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import i16, i32, i64

from strom.broker.log.records import HEADER_SIZE, BatchHeader, build_batch, iter_records

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def deliver(target: Target, topic: str, records: list[dict], **config) -> list[tuple]:
    """Produces `records` (kwargs of Producer.produce) one by one; (error, partition, offset,
    timestamp type) of each delivery report."""
    producer = target.producer(**config)
    reports: list[tuple] = []

    def report(error, message):
        reports.append((error.name() if error else None, message.partition(), message.offset(),
                        message.timestamp()[0]))
    for record in records:
        producer.produce(topic, on_delivery=report, **record)
        producer.flush(30)
    return reports


def read_all(target: Target, topic: str, count: int, **config) -> list:
    consumer = target.consumer(**config)
    consumer.subscribe([topic])
    messages = []
    deadline = time.monotonic() + 30
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            messages.append(message)
    consumer.close()
    return messages


def raw_produce(target: Target, topic: str, records: bytes, partition: int = 0):
    request = produce.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
        topic_data=(produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=i32(partition), records=records),)),))
    with target.wire() as client:
        return client.send(request).responses[0].partition_responses[0]


def test_offsets_of_sequential_records(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("seq")
        return deliver(t, topic, [{"value": b"a"}, {"value": b"b"}, {"value": b"c", "key": b"k"}])
    assert peers.same(scenario) == [(None, 0, 0, TIMESTAMP_CREATE_TIME), (None, 0, 1, TIMESTAMP_CREATE_TIME),
                                    (None, 0, 2, TIMESTAMP_CREATE_TIME)]


def test_offsets_per_partition(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("parts", partitions=3)
        return deliver(t, topic, [{"value": b"v", "partition": p} for p in (0, 2, 2, 1, 2, 0)])
    assert [r[2] for r in peers.same(scenario)] == [0, 0, 1, 0, 2, 1]


def test_create_time_is_kept(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("create-time")
        deliver(t, topic, [{"value": b"x", "timestamp": 1_000}, {"value": b"y", "timestamp": 5_000}])
        return [(m.offset(), m.timestamp()) for m in read_all(t, topic, 2)]
    assert peers.same(scenario) == [(0, (TIMESTAMP_CREATE_TIME, 1_000)), (1, (TIMESTAMP_CREATE_TIME, 5_000))]


def test_log_append_time_topic_stamps_records(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("append-time", **{"message.timestamp.type": "LogAppendTime"})
        before = int(time.time() * 1000)
        reports = deliver(t, topic, [{"value": b"x", "timestamp": 1_000}])
        after = int(time.time() * 1000)
        messages = read_all(t, topic, 1)
        kind, stamp = messages[0].timestamp()
        return reports, kind, before - 1000 <= stamp <= after + 1000
    reports = [(None, 0, 0, TIMESTAMP_LOG_APPEND_TIME)]
    assert peers.same(scenario) == (reports, TIMESTAMP_LOG_APPEND_TIME, True)


def test_keys_values_and_headers_round_trip(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("headers")
        deliver(t, topic, [{"value": None, "key": b"k"}, {"value": b"v", "key": None},
                           {"value": b"", "key": b"", "headers": [("h", b"1"), ("h", None), ("e", b"")]}])
        return [(m.key(), m.value(), m.headers()) for m in read_all(t, topic, 3)]
    assert peers.same(scenario)[2][2] == [("h", b"1"), ("h", None), ("e", b"")]


def test_batch_above_max_message_bytes_is_too_large(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("too-large", **{"max.message.bytes": "1000"})
        return deliver(t, topic, [{"value": b"x" * 5000}], **{"message.max.bytes": 1_000_000})
    assert peers.same(scenario) == [("MSG_SIZE_TOO_LARGE", 0, None, 0)]


def test_produce_to_a_partition_that_does_not_exist(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("no-partition")
        answer = raw_produce(t, topic, build_batch([(b"k", b"v")], 1_000), partition=7)
        return answer.error_code.name, answer.base_offset
    assert peers.same(scenario) == ("unknown_topic_or_partition", -1)


def test_compacted_topic_refuses_records_without_a_key(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("compact-keyless", **{"cleanup.policy": "compact"})
        answer = raw_produce(t, topic, build_batch([(b"k", b"v"), (None, b"v"), (None, b"w")], 1_000))
        return (answer.error_code.name, answer.base_offset, answer.error_message,
                [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors])
    code, offset, message, errors = peers.same(scenario)
    assert code == "invalid_record" and offset == -1
    refusal = "Compacted topic cannot accept message without key in topic partition <compact-keyless>-0"
    assert errors == [(1, refusal), (2, refusal)]
    assert message.startswith("One or more records have been rejected due to 2 record errors")


def test_compacted_topic_refusal_as_librdkafka_reports_it(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("compact-keyless-client", **{"cleanup.policy": "compact,delete"})
        return deliver(t, topic, [{"value": b"v"}, {"value": b"v", "key": b"k"}],
                       **{"retries": 0, "enable.idempotence": False})
    assert peers.same(scenario)[0][0] == "INVALID_RECORD"


def test_metadata_for_unknown_and_illegal_topics(peers: Peers) -> None:
    def scenario(t: Target):
        request = metadata.MetadataRequest(
            topics=tuple(metadata.MetadataRequestTopic(topic_id=None, name=n)
                         for n in (t.name_of("absent"), "bad/name", "a" * 250)),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        with t.wire() as client:
            answer = client.send(request)
        return sorted((topic.name, topic.error_code.name, len(topic.partitions)) for topic in answer.topics)
    observed = peers.same(scenario)
    assert {code for _, code, _ in observed} == {"unknown_topic_or_partition", "invalid_topic_exception"}


def test_consumer_sees_offsets_and_partition_eof(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("eof")
        deliver(t, topic, [{"value": b"a"}, {"value": b"b"}])
        consumer = t.consumer(**{"enable.partition.eof": True})
        consumer.subscribe([topic])
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                seen.append((message.error().code() == KafkaError._PARTITION_EOF, message.offset()))
                break
            seen.append((message.value(), message.offset()))
        consumer.close()
        return seen
    assert peers.same(scenario) == [(b"a", 0), (b"b", 1), (True, 2)]


def stored_batches(target: Target, topic: str) -> list[tuple[int, bytes, list[bytes | None]]]:
    """Each batch partition 0 of `topic` holds, as Fetch hands it out: (codec, the first four bytes of
    its records, which name the compressed format, its values)."""
    request = fetch.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=100), min_bytes=i32(1), max_bytes=i32(1 << 20),
        topics=(fetch.FetchTopic(topic=topic, partitions=(fetch.FetchPartition(
            partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)),)),))
    with target.wire() as client:
        records = bytes(client.send(request).responses[0].partitions[0].records or b"")
    batches, position = [], 0
    while position < len(records):
        header = BatchHeader.parse(records, position)
        batch = records[position:position + header.length]
        batches.append((header.compression, batch[HEADER_SIZE:HEADER_SIZE + 4],
                        [record.value for record in iter_records(batch)]))
        position += header.length
    return batches


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
def test_a_topics_compression_type_recompresses_what_producers_send(peers: Peers, codec: str) -> None:
    """Kafka stores a batch with its topic's codec, whatever the producer used (snappy in Java's framing,
    LZ4 frames); consumers read the records back."""
    def scenario(t: Target):
        topic = t.topic(codec, **{"compression.type": codec})
        sent = [b"value-%d" % i * 20 for i in range(50)]
        producer = t.producer(**{"compression.type": "gzip" if codec == "uncompressed" else "none",
                                 "linger.ms": 1000})
        for value in sent:
            producer.produce(topic, value)
        assert producer.flush(30) == 0
        read = [m.value() for m in read_all(t, topic, len(sent))]
        assert read == sent
        return [(stored_codec, magic) for stored_codec, magic, _ in stored_batches(t, topic)]
    observed = peers.same(scenario)
    assert observed and {stored for stored, _ in observed} == {
        {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]}
