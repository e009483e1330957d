"""read_range against the broker, without Spark: a range is read whole and ends promptly."""

from __future__ import annotations

import gc
import pickle
import time

import pytest
from confluent_kafka import TopicPartition

from strom.kafka import clients
from strom.spark.connector.metadata import TopicMetadata
from strom.spark.connector.options import source_options
from strom.spark.connector.reader import OffsetRange, ReadSettings, read_range
from strom.spark.connector.source import KafkaStreamReader, kafka_schema

pytestmark = [pytest.mark.broker]

# The broker holds a fetch at the end of the log this long: a read that waited for the
# end-of-partition event would take at least this.
LONG_FETCH_WAIT_MS = 5000


def _transactions(bootstrap: str, topic: str, committed: int, aborted: int) -> None:
    producer = clients.producer(bootstrap, **{"transactional.id": f"reader-test-{topic}"})
    producer.init_transactions(30)
    for count, commit in ((committed, True), (aborted, False)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, f"v{i}".encode(), f"k{i}".encode())
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)


def _stable_end(bootstrap: str, topic: str) -> int:
    """The last stable offset once it has caught up with the high watermark (markers written)."""
    metadata = TopicMetadata(source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                                            streaming=False))
    consumer = clients.consumer(bootstrap)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stable = metadata.latest([(topic, 0)])[(topic, 0)]
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        if stable == high:
            consumer.close()
            return stable
        time.sleep(0.05)
    raise AssertionError(f"last stable offset of {topic} never reached the high watermark")


def _read(bootstrap: str, part: OffsetRange) -> list[dict]:
    settings = ReadSettings(bootstrap, {"fetch.wait.max.ms": str(LONG_FETCH_WAIT_MS)},
                            fail_on_data_loss=True, include_headers=False)
    return [row for batch in read_range(part, settings, kafka_schema(False)) for row in batch.to_pylist()]


def test_a_range_ending_in_transaction_markers_ends_without_waiting_for_the_broker(broker, new_topic):
    topic = new_topic()
    _transactions(broker.bootstrap_servers, topic, committed=300, aborted=50)
    end = _stable_end(broker.bootstrap_servers, topic)
    assert end == 300 + 1 + 50 + 1  # records and a marker per transaction

    started = time.monotonic()
    rows = _read(broker.bootstrap_servers, OffsetRange(topic, 0, 0, end))
    elapsed = time.monotonic() - started

    assert [r["offset"] for r in rows] == list(range(300))  # aborted records skipped
    assert [r["value"] for r in rows[:2]] == [b"v0", b"v1"]
    assert elapsed < LONG_FETCH_WAIT_MS / 1000 / 2, elapsed


def test_a_range_stops_at_its_end_inside_the_log(broker, new_topic, produce):
    topic = new_topic()
    produce(broker.bootstrap_servers, topic, [(b"k", f"v{i}".encode()) for i in range(100)])
    rows = _read(broker.bootstrap_servers, OffsetRange(topic, 0, 20, 70))
    assert [r["offset"] for r in rows] == list(range(20, 70))
    assert {(r["topic"], r["partition"]) for r in rows} == {(topic, 0)}


def test_a_read_that_librdkafka_runs_ahead_of_does_not_stall(broker, new_topic, produce):
    """Once queued.min.messages wait in its queue, librdkafka stops fetching for
    fetch.queue.backoff.ms (1 s by default): with a small queue, a read used to pause that long
    every few thousand records."""
    topic = new_topic()
    produce(broker.bootstrap_servers, topic, [(b"k", b"v" * 100)] * 40_000,
            **{"linger.ms": 50, "batch.size": 1_000_000})  # fetches of many records, as in a backlog
    settings = ReadSettings(broker.bootstrap_servers, {"queued.min.messages": "1000"},
                            fail_on_data_loss=True, include_headers=False)
    started = time.monotonic()
    rows = sum(batch.num_rows for batch in read_range(OffsetRange(topic, 0, 0, 40_000), settings,
                                                      kafka_schema(False)))
    elapsed = time.monotonic() - started
    assert rows == 40_000
    assert elapsed < 2.5, elapsed  # 4 s and more with a 1 s backoff


def test_the_garbage_collector_runs_again_after_a_read(broker, new_topic, produce):
    topic = new_topic()
    produce(broker.bootstrap_servers, topic, [(b"k", b"v")] * 10)
    settings = ReadSettings(broker.bootstrap_servers, {}, fail_on_data_loss=True, include_headers=False)
    batches = read_range(OffsetRange(topic, 0, 0, 10), settings, kafka_schema(False))
    first = next(batches)
    assert gc.isenabled()  # Spark's code runs between batches
    assert first.num_rows + sum(batch.num_rows for batch in batches) == 10
    assert gc.isenabled()


def test_a_stream_reader_pickles_to_executors_without_its_driver_admin_client(broker, new_topic):
    topic = new_topic()
    reader = KafkaStreamReader(source_options({"kafka.bootstrap.servers": broker.bootstrap_servers,
                                               "subscribe": topic}, streaming=True), kafka_schema(False))
    assert reader.initialOffset() == {topic: {"0": 0}}
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._metadata_client is None
    assert reader._metadata_client is not None  # the driver's reader keeps its client
    assert copy.initialOffset() == {topic: {"0": 0}}  # built again where it is used
