"""Arrow rows of Spark's Kafka schema become a task's raw records, per partition (no Spark, no broker)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from strom.spark.connector.source import kafka_schema
from strom.spark.runtime.microbatch_task import consumer_records
from strom.streams.processor.records import TopicPartition

UTC = dt.UTC


def rows(*specs: tuple[int, int, list[tuple[str, bytes]] | None]) -> pa.RecordBatch:
    """(partition, offset, headers) rows of topic "t"; key and value name the offset."""
    data = {
        "key": [f"k{o}".encode() for _, o, _ in specs],
        "value": [f"v{o}".encode() for _, o, _ in specs],
        "topic": ["t"] * len(specs),
        "partition": [p for p, _, _ in specs],
        "offset": [o for _, o, _ in specs],
        "timestamp": [dt.datetime.fromtimestamp(o, UTC) for _, o, _ in specs],
        "timestampType": [0] * len(specs),
        "headers": [None if h is None else [{"key": k, "value": v} for k, v in h] for _, _, h in specs],
    }
    schema = to_arrow_schema(kafka_schema(True), timezone="UTC")
    return pa.RecordBatch.from_arrays([pa.array(data[f.name], f.type) for f in schema], schema=schema)


def test_rows_in_runs_of_partitions_are_grouped_and_committed_offsets_dropped():
    batch = rows((0, 0, None), (0, 1, None), (0, 2, [("h", b"1")]), (1, 5, None), (1, 6, None),
                 (0, 3, None), (2, 9, None))
    out = consumer_records(batch, {("t", 0): 1, ("t", 1): 7})

    assert set(out) == {TopicPartition("t", 0), TopicPartition("t", 2)}  # partition 1: all committed
    first = out[TopicPartition("t", 0)]
    assert [(r.offset, r.key, r.value, r.timestamp) for r in first] == [
        (1, b"k1", b"v1", 1000), (2, b"k2", b"v2", 2000), (3, b"k3", b"v3", 3000)]
    assert [r.headers for r in first] == [(), (("h", b"1"),), ()]
    assert [r.offset for r in out[TopicPartition("t", 2)]] == [9]
