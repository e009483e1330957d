"""Streaming reads through format("strom"): offsets, admission control, progress, errors."""

from __future__ import annotations

import json
import uuid

import pytest

from strom.spark.connector.progress import offsets_behind_latest

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def _stream(spark, broker, **options):
    reader = spark.readStream.format("strom").option("kafka.bootstrap.servers", broker.bootstrap_servers)
    return reader.options(**options).load()


def _to_memory(df, tmp_path, **trigger):
    name = f"m_{uuid.uuid4().hex[:8]}"
    query = (df.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / name)).trigger(**trigger).start())
    return name, query


def test_max_offsets_per_trigger_bounds_batches_and_progress_reports_lag(
        spark, broker, new_topic, produce, tmp_path):
    topic = new_topic(partitions=2)
    produce(broker.bootstrap_servers, topic, [(None, f"{i}".encode(), i % 2) for i in range(100)])
    df = _stream(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="30")
    name, query = _to_memory(df, tmp_path, availableNow=True)
    query.awaitTermination(120)
    sizes = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    assert sizes == [30, 30, 30, 10]
    assert sorted(int(r.value) for r in spark.table(name).collect()) == list(range(100))
    lags = [offsets_behind_latest(p.sources[0]) for p in query.recentProgress if p.numInputRows]
    assert lags[0] == {"minOffsetsBehindLatest": 35.0, "maxOffsetsBehindLatest": 35.0,
                       "avgOffsetsBehindLatest": 35.0}
    assert lags[-1]["maxOffsetsBehindLatest"] == 0.0


def test_starting_offsets_latest_reads_only_new_records(spark, broker, new_topic, produce, tmp_path):
    topic = new_topic()
    produce(broker.bootstrap_servers, topic, [(None, b"old")])
    df = _stream(spark, broker, subscribe=topic)
    name, query = _to_memory(df, tmp_path, processingTime="200 milliseconds")
    try:
        query.processAllAvailable()
        produce(broker.bootstrap_servers, topic, [(None, b"new")])
        query.processAllAvailable()
        assert [r.value for r in spark.table(name).collect()] == [b"new"]
    finally:
        query.stop()


def test_starting_offsets_json_and_earliest(spark, broker, new_topic, produce, tmp_path):
    topic = new_topic(partitions=2)
    records = [(None, f"{p}-{i}".encode(), p) for p in (0, 1) for i in range(5)]
    produce(broker.bootstrap_servers, topic, records)
    start = json.dumps({topic: {"0": 3, "1": -2}})
    name, query = _to_memory(_stream(spark, broker, subscribe=topic, startingOffsets=start), tmp_path,
                             availableNow=True)
    query.awaitTermination(120)
    assert sorted(r.value.decode() for r in spark.table(name).collect()) == [
        "0-3", "0-4", "1-0", "1-1", "1-2", "1-3", "1-4"]


def test_unknown_topic_fails_the_query_naming_the_option(spark, broker, tmp_path):
    _, query = _to_memory(_stream(spark, broker, subscribe="no-such-topic-stream"), tmp_path,
                          availableNow=True)
    with pytest.raises(Exception, match="Option 'subscribe' names unknown topics"):
        query.awaitTermination(120)
