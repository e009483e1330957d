"""The connector on the 3-node Apache Kafka cluster: a streaming aggregation read through
``format("strom")`` and written back through the exactly-once sink, read read_committed."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from pyspark.sql import functions as F

from strom.kafka import clients
from strom.spark.connector.metadata import TopicMetadata
from strom.spark.connector.options import source_options
from support.kafka import create_topic, produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_streaming_count_from_and_to_apache_kafka_exactly_once(spark, kafka_cluster, tmp_path):
    bootstrap = kafka_cluster.bootstrap_servers
    source, sink = create_topic(bootstrap, 2, "akc-source"), create_topic(bootstrap, 2, "akc-sink")
    records = [(f"k{i % 7}", f"v{i}") for i in range(350)]
    produce(bootstrap, source, records)
    events = (spark.readStream.format("strom").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "100").load())
    counts = events.groupBy("key").count()
    query = (counts.select("key", F.col("count").cast("string").alias("value"))
             .writeStream.format("strom").outputMode("complete")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
             .option("delivery.guarantee", "exactly_once")
             .option("checkpointLocation", str(tmp_path / f"checkpoint-{uuid.uuid4().hex[:8]}"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(240)
    assert query.exception() is None
    batches = [p for p in query.recentProgress if p.numInputRows]
    assert [p.numInputRows for p in batches] == [100, 100, 100, 50]

    written = read_topic(bootstrap, sink)
    latest = {m.key().decode(): int(m.value()) for m in written}
    assert latest == dict(Counter(key for key, _ in records))
    assert len(written) == 7 * len(batches)  # complete mode: every key once per batch, none twice


def test_offsets_of_a_topic_just_created_are_listed_while_its_leaders_spread(kafka_cluster):
    """Right after a topic is created the cluster's nodes learn its partitions' leaders one after another:
    listing offsets (``lag()``, a stream's latest offsets) meanwhile gets NOT_LEADER_FOR_PARTITION from
    some, which the listing asks again for a few seconds instead of failing."""
    bootstrap = kafka_cluster.bootstrap_servers
    for _ in range(3):
        topic = f"fresh-{uuid.uuid4().hex[:8]}"
        clients.create_topics(bootstrap, {topic: 32})
        metadata = TopicMetadata(source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                                                streaming=False))
        partitions = [(topic, p) for p in range(32)]
        assert metadata.latest(partitions) == dict.fromkeys(partitions, 0)
        assert metadata.earliest(partitions) == dict.fromkeys(partitions, 0)
