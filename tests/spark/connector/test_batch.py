"""Batch reads and writes through format("strom") against the embedded broker."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pyspark.sql import functions as F

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def _write(df, broker, **options):
    writer = df.write.format("strom").mode("append").option("kafka.bootstrap.servers",
                                                            broker.bootstrap_servers)
    writer.options(**options).save()


def _read(spark, broker, **options):
    reader = spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap_servers)
    return reader.options(**options).load()


def test_round_trip_of_keys_values_headers_timestamps(spark, broker, new_topic, produce, consume_all):
    topic = new_topic(partitions=2)
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    rows = [(f"k{i}".encode(), f"value-{i}".encode(), [("h", f"{i}".encode()), ("n", None)])
            for i in range(50)]
    schema = "key binary, value binary, headers array<struct<key:string,value:binary>>"
    df = spark.createDataFrame(rows, schema)
    _write(df, broker, topic=topic)

    read = _read(spark, broker, subscribe=topic, includeHeaders="true").collect()
    assert sorted((r.key, r.value) for r in read) == sorted((k, v) for k, v, _ in rows)
    assert all(r.headers == [("h", r.key[1:]), ("n", None)] for r in read)
    assert {r.topic for r in read} == {topic} and {r.partition for r in read} <= {0, 1}
    assert all(r.timestampType == 0 and r.timestamp is not None for r in read)

    # Explicit timestamps survive the trip through the broker and Arrow.
    ts_topic = new_topic()
    produce(broker.bootstrap_servers, ts_topic, [(b"k", b"v", 0, None, int(when.timestamp() * 1000))])
    [row] = _read(spark, broker, subscribe=ts_topic).collect()
    assert row.timestamp.astimezone(dt.UTC) == when and row.offset == 0 and row.timestampType == 0


def test_topic_and_partition_columns_and_string_values(spark, broker, new_topic, produce, consume_all):
    first, second = new_topic(partitions=3), new_topic()
    df = spark.createDataFrame(
        [(first, 2, "a", "one"), (second, 0, None, "two"), (first, 1, "c", "three")],
        "topic string, partition int, key string, value string",
    )
    _write(df, broker)
    got_first = consume_all(broker.bootstrap_servers, first, expected=2)
    assert sorted((m.partition(), m.key(), m.value()) for m in got_first) == [
        (1, b"c", b"three"), (2, b"a", b"one")]
    [only] = consume_all(broker.bootstrap_servers, second, expected=1)
    assert only.key() is None and only.value() == b"two"


def test_exactly_once_batch_write_is_read_committed(spark, broker, new_topic, produce, consume_all):
    topic = new_topic(partitions=2)
    df = spark.range(1000).select(F.col("id").cast("string").alias("key"),
                                  F.to_json(F.struct("id")).alias("value")).repartition(3)
    _write(df, broker, topic=topic, **{"delivery.guarantee": "exactly_once"})
    got = consume_all(broker.bootstrap_servers, topic, expected=1000)
    assert sorted(json.loads(m.value())["id"] for m in got) == list(range(1000))


def test_starting_and_ending_offsets_in_every_form(spark, broker, new_topic, produce, consume_all):
    topic = new_topic(partitions=2)
    produce(broker.bootstrap_servers, topic, [(b"k", b"v", p) for p in (0, 1) for i in range(10)])

    def offsets(**options):
        return sorted((r.partition, r.offset) for r in _read(spark, broker, **options).collect())

    every = [(p, o) for p in (0, 1) for o in range(10)]
    assert offsets(subscribe=topic) == every
    assert offsets(subscribe=topic, startingOffsets="earliest", endingOffsets="latest") == every
    assert offsets(subscribe=topic, startingOffsets=json.dumps({topic: {"0": 7, "1": -2}}),
                   endingOffsets=json.dumps({topic: {"0": -1, "1": 3}})) == [
        (0, 7), (0, 8), (0, 9), (1, 0), (1, 1), (1, 2)]
    assert offsets(assign=json.dumps({topic: [1]}), startingOffsets=json.dumps({topic: {"1": 8}})) == [
        (1, 8), (1, 9)]
    prefix = topic.rsplit("-", 1)[0]
    assert offsets(subscribePattern=f"{prefix}-.*") == every


def test_min_partitions_spreads_one_topic_partition_over_tasks(spark, broker, new_topic, produce):
    topic = new_topic()
    produce(broker.bootstrap_servers, topic, [(None, f"{i}".encode()) for i in range(10)])
    df = _read(spark, broker, subscribe=topic, minPartitions="3")
    assert df.rdd.getNumPartitions() == 3
    assert sorted(r.offset for r in df.collect()) == list(range(10))


def test_read_uncommitted_and_pattern_over_many_topics(spark, broker, new_topic, produce, consume_all):
    a, b = new_topic(), new_topic()
    produce(broker.bootstrap_servers, a, [(None, b"a")])
    produce(broker.bootstrap_servers, b, [(None, b"b1"), (None, b"b2")])
    df = _read(spark, broker, subscribe=f"{a},{b}", **{"kafka.isolation.level": "read_uncommitted"})
    assert sorted(r.value for r in df.collect()) == [b"a", b"b1", b"b2"]
    assert df.groupBy("topic").count().orderBy("topic").collect() == sorted(
        [(a, 1), (b, 2)], key=lambda t: t[0])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "no-such-topic-xyz"}, "Option 'subscribe' names unknown topics"),
        ({"assign": '{"no-such-topic-xyz":[0]}'}, "Option 'assign' names partitions that do not exist"),
        ({"subscribe": "t", "startingOffsets": '{"t":{"0":'}, "Option 'startingOffsets' is not valid JSON"),
        ({}, "exactly one of the options 'subscribe', 'subscribePattern' or 'assign'"),
    ],
)
def test_bad_input_gets_an_error_naming_the_option(spark, broker, options, message):
    with pytest.raises(Exception, match=message):
        _read(spark, broker, **options).collect()


def test_starting_offsets_past_ending_offsets_is_named(spark, broker, new_topic, produce):
    topic = new_topic()
    produce(broker.bootstrap_servers, topic, [(None, b"a"), (None, b"b"), (None, b"c")])
    with pytest.raises(Exception, match="Option 'startingOffsets' is past 'endingOffsets'"):
        _read(spark, broker, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 2}}),
              endingOffsets=json.dumps({topic: {"0": 1}})).collect()


def test_bad_sink_input_is_named(spark, broker):
    df = spark.createDataFrame([("a", 1)], "value string, extra int")
    with pytest.raises(Exception, match="Column 'extra' cannot be written"):
        _write(df, broker, topic="x")
    with pytest.raises(Exception, match="set option 'topic' or add a 'topic' column"):
        _write(spark.createDataFrame([("a",)], "value string"), broker)


def test_data_loss_fails_naming_fail_on_data_loss_or_is_skipped(spark, broker, new_topic, produce):
    from confluent_kafka import TopicPartition

    from strom.kafka import clients

    topic = new_topic()
    produce(broker.bootstrap_servers, topic, [(None, f"{i}".encode()) for i in range(10)])
    admin = clients.admin(broker.bootstrap_servers)
    for future in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
        future.result(30)
    start = json.dumps({topic: {"0": 2}})
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        _read(spark, broker, subscribe=topic, startingOffsets=start).collect()
    kept = _read(spark, broker, subscribe=topic, startingOffsets=start, failOnDataLoss="false").collect()
    assert [r.offset for r in kept] == [6, 7, 8, 9]
