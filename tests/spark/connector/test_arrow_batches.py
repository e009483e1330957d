"""Consumed messages become Arrow batches whose schema is exactly what Spark expects."""

from __future__ import annotations

import datetime as dt

from confluent_kafka import Message
from pyspark.sql.pandas.types import to_arrow_schema

from strom.spark.connector.reader import OffsetRange, _BatchBuilder
from strom.spark.connector.source import kafka_schema


def _schema(headers: bool):
    return to_arrow_schema(kafka_schema(headers), timezone="UTC")


def test_messages_map_to_spark_kafka_columns():
    messages = [
        Message(topic="t", partition=3, offset=10, key=b"k", value=b"v", headers=[("h", b"1")],
                timestamp=(1, 1_700_000_000_123)),
        Message(topic="t", partition=3, offset=11, key=None, value=None, headers=None, timestamp=(2, 5)),
        Message(topic="t", partition=3, offset=12, key=b"", value=b"x", timestamp=(0, -1)),
    ]
    batch = _BatchBuilder(OffsetRange("t", 3, 10, 13), _schema(True), include_headers=True).build(messages)
    assert batch.schema.equals(_schema(True))
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [10, 11, 12]
    assert [(r["key"], r["value"]) for r in rows] == [(b"k", b"v"), (None, None), (b"", b"x")]
    assert {(r["topic"], r["partition"]) for r in rows} == {("t", 3)}
    assert [r["timestampType"] for r in rows] == [0, 1, -1]
    assert rows[0]["timestamp"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert rows[2]["timestamp"] is None
    assert rows[0]["headers"] == [{"key": "h", "value": b"1"}] and rows[1]["headers"] is None


def test_without_headers_the_schema_has_seven_columns():
    message = Message(topic="t", partition=0, offset=0, value=b"v", timestamp=(1, 0))
    batch = _BatchBuilder(OffsetRange("t", 0, 0, 1), _schema(False), include_headers=False).build([message])
    assert batch.schema.equals(_schema(False)) and batch.num_columns == 7


def test_offsets_with_gaps_are_kept_as_consumed():
    """Skipped transaction markers and aborted records leave gaps: offsets are not a range."""
    offsets = [5, 6, 8, 9]  # 7 was a marker
    messages = [Message(topic="t", partition=0, offset=o, value=b"v", timestamp=(1, 0)) for o in offsets]
    batch = _BatchBuilder(OffsetRange("t", 0, 5, 10), _schema(False), include_headers=False).build(messages)
    assert batch.column("offset").to_pylist() == offsets


def test_contiguous_offsets_are_the_consumed_ones():
    messages = [Message(topic="t", partition=0, offset=o, value=b"v", timestamp=(1, 0))
                for o in range(40, 45)]
    batch = _BatchBuilder(OffsetRange("t", 0, 40, 45), _schema(False), include_headers=False).build(messages)
    assert batch.column("offset").to_pylist() == list(range(40, 45))
