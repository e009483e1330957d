"""Mistakes fail SparkStreams.start() with a StromError that says what to do, before Spark runs."""

from __future__ import annotations

import pytest

from strom.errors import ConfigError, CoPartitioningError, TopologyError
from strom.spark.runtime import SparkStreams
from strom.streams import Consumed, Serdes, StreamsBuilder

from .wordcount import word_count

pytestmark = [pytest.mark.broker]
S = Serdes.String()


def _props(broker, tmp_path, **extra) -> dict:
    return {"application.id": "rt-bad", "bootstrap.servers": broker.bootstrap_servers,
            "state.dir": str(tmp_path), **extra}


def test_missing_bootstrap_servers_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        SparkStreams(word_count("a", "b"), {"application.id": "x", "state.dir": str(tmp_path)})


def test_unknown_key_gets_a_did_you_mean(broker, tmp_path):
    with pytest.raises(ConfigError, match=r"max\.offsets\.per\.trigger"):
        SparkStreams(word_count("a", "b"), _props(broker, tmp_path, **{"max.offset.per.trigger": 5}))


def test_missing_source_topic_fails_start(broker, tmp_path):
    app = SparkStreams(word_count("rt-no-such-topic", "b"), _props(broker, tmp_path))
    with pytest.raises(TopologyError, match="create the topic"):
        app.start()


def test_missing_serde_fails_start_not_a_spark_task(broker, topics, tmp_path):
    names = topics(lines=1)
    builder = StreamsBuilder()
    builder.stream(names["lines"], Consumed.with_(S, S)).group_by(lambda k, v: v).count().to_stream().to("x")
    with pytest.raises(ConfigError, match="needs a key serde"):
        SparkStreams(builder.build(), _props(broker, tmp_path)).start()


def test_copartitioning_mismatch_fails_start(broker, topics, tmp_path):
    names = topics(left=2, right=3)
    builder = StreamsBuilder()
    left = builder.stream(names["left"], Consumed.with_(S, S))
    right = builder.table(names["right"], Consumed.with_(S, S))
    left.join(right, lambda a, b: a + b).to("joined")
    with pytest.raises(CoPartitioningError, match="same number of partitions"):
        SparkStreams(builder.build(), _props(broker, tmp_path)).start()
