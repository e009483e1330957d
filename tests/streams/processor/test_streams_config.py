"""StreamsConfig takes a Java application's property file: every Kafka Streams 4.x key is accepted (used,
or logged once as without effect on Spark); unknown keys fail with a did-you-mean hint."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from strom.errors import ConfigError
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig

# Every key of Kafka Streams 4.x's StreamsConfig (org.apache.kafka.streams.StreamsConfig), with a value
# a Java application could give it.
KAFKA_STREAMS_4_KEYS = {
    "acceptable.recovery.lag": 10000, "application.server": "host:8080", "bootstrap.servers": "b:9092",
    "buffered.records.per.partition": 1000, "built.in.metrics.version": "latest",
    "cache.max.bytes.buffering": 1024, "client.id": "c", "commit.interval.ms": 1000,
    "connections.max.idle.ms": 540000, "default.client.supplier": "x.Supplier",
    "default.deserialization.exception.handler": "LogAndContinueExceptionHandler",
    "default.dsl.store": "rocksDB", "default.key.serde": None,
    "default.list.key.serde.inner": "x", "default.list.key.serde.type": "java.util.ArrayList",
    "default.list.value.serde.inner": "x", "default.list.value.serde.type": "java.util.ArrayList",
    "default.production.exception.handler": "DefaultProductionExceptionHandler",
    "default.timestamp.extractor": None, "default.value.serde": None,
    "deserialization.exception.handler": "LogAndFailExceptionHandler",
    "dsl.store.suppliers.class": ("org.apache.kafka.streams.state."
                                  "BuiltInDslStoreSuppliers$RocksDBDslStoreSuppliers"),
    "enable.metrics.push": True, "ensure.explicit.internal.resource.naming": False,
    "errors.dead.letter.queue.topic.name": "dlq", "group.protocol": "classic",
    "log.summary.interval.ms": 120000, "max.task.idle.ms": 0, "max.warmup.replicas": 2,
    "metadata.max.age.ms": 300000, "metric.reporters": "", "metrics.num.samples": 2,
    "metrics.recording.level": "INFO", "metrics.sample.window.ms": 30000, "num.standby.replicas": 1,
    "num.stream.threads": 4, "poll.ms": 100, "probing.rebalance.interval.ms": 600000,
    "processing.exception.handler": "LogAndFailProcessingExceptionHandler",
    "processing.guarantee": "exactly_once_v2",
    "production.exception.handler": "DefaultProductionExceptionHandler",
    "rack.aware.assignment.non_overlap_cost": 1, "rack.aware.assignment.strategy": "none",
    "rack.aware.assignment.tags": "zone", "rack.aware.assignment.traffic_cost": 1,
    "receive.buffer.bytes": 32768, "reconnect.backoff.max.ms": 1000, "reconnect.backoff.ms": 50,
    "repartition.purge.interval.ms": 30000, "replication.factor": 3, "request.timeout.ms": 40000,
    "retry.backoff.ms": 100, "rocksdb.config.setter": "x.Setter", "security.protocol": "PLAINTEXT",
    "send.buffer.bytes": 131072, "state.cleanup.delay.ms": 600000, "state.dir": "/tmp/ks",
    "statestore.cache.max.bytes": 1024, "task.assignor.class": "x.Assignor", "task.timeout.ms": 300000,
    "topology.optimization": "all", "upgrade.from": "3.9", "window.size.ms": 1000,
    "windowed.inner.class.serde": "x", "windowstore.changelog.additional.retention.ms": 3600000,
    "auto.offset.reset": "earliest",
    "producer.linger.ms": 5, "consumer.fetch.min.bytes": 1, "main.consumer.fetch.wait.max.ms": 10,
    "restore.consumer.fetch.max.bytes": 1000, "global.consumer.fetch.max.bytes": 2000,
    "admin.retries": 3, "topic.min.insync.replicas": 2, "client.tag.zone": "eu-1",
}


def test_every_kafka_streams_4_key_is_accepted():
    config = StreamsConfig({"application.id": "a", **KAFKA_STREAMS_4_KEYS})
    assert config["replication.factor"] == 3
    assert config["windowstore.changelog.additional.retention.ms"] == 3_600_000


def test_keys_without_effect_are_logged_once_at_info_with_the_reason(caplog):
    cfg._reported.discard("max.warmup.replicas")
    with caplog.at_level(logging.INFO, logger="strom.streams.config"):
        StreamsConfig({"application.id": "a", "max.warmup.replicas": 1})
        StreamsConfig({"application.id": "b", "max.warmup.replicas": 2})
    records = [r for r in caplog.records if "max.warmup.replicas" in r.getMessage()]
    assert len(records) == 1 and records[0].levelno == logging.INFO
    assert "no warm-up tasks" in records[0].getMessage()


def test_global_consumer_keys_are_reported_without_effect(caplog):
    cfg._reported.discard("global.consumer.fetch.max.bytes")
    with caplog.at_level(logging.INFO, logger="strom.streams.config"):
        StreamsConfig({"application.id": "a", "global.consumer.fetch.max.bytes": 1})
    assert "'global.consumer.fetch.max.bytes' has no effect" in caplog.text


def test_unknown_keys_fail_with_a_did_you_mean_hint():
    with pytest.raises(ConfigError, match=r"Did you mean 'application.server'.*docs/configuration.md"):
        StreamsConfig({"application.id": "a", "application.sever": "h:1"})
    with pytest.raises(ConfigError, match=r"Did you mean 'task\.timeout\.ms'"):
        StreamsConfig({"application.id": "a", "task.timout.ms": 1})


def test_kafka_4_handler_names_win_over_the_deprecated_ones():
    config = StreamsConfig({"application.id": "a",
                            "default.deserialization.exception.handler": "LogAndFailExceptionHandler",
                            "deserialization.exception.handler": "LogAndContinueExceptionHandler",
                            "production.exception.handler": "x.Handler"})
    assert config["default.deserialization.exception.handler"] == "LogAndContinueExceptionHandler"
    assert config["default.production.exception.handler"] == "x.Handler"


def test_dsl_store_suppliers_class_sets_the_default_store():
    in_memory = "org.apache.kafka.streams.state.BuiltInDslStoreSuppliers$InMemoryDslStoreSuppliers"
    assert StreamsConfig({"application.id": "a", "dsl.store.suppliers.class": in_memory})[
        "default.dsl.store"] == "in_memory"
    with pytest.raises(ConfigError, match="RocksDBDslStoreSuppliers"):
        StreamsConfig({"application.id": "a", "dsl.store.suppliers.class": "my.Suppliers"})


@pytest.mark.parametrize("value", [0, -2, "x", True])
def test_replication_factor_is_positive_or_minus_one(value):
    with pytest.raises(ConfigError, match=r"replication\.factor"):
        StreamsConfig({"application.id": "a", "replication.factor": value})


def test_default_replication_factor_is_the_brokers():
    assert StreamsConfig({"application.id": "a"})["replication.factor"] == -1


def test_client_props_layer_common_consumer_and_role_keys():
    config = StreamsConfig({"application.id": "a", "security.protocol": "SSL", "retry.backoff.ms": 7,
                            "send.buffer.bytes": 1000, "request.timeout.ms": 9000,
                            "consumer.fetch.min.bytes": 10, "consumer.fetch.max.bytes": 5000,
                            "restore.consumer.fetch.max.bytes": 9000, "producer.linger.ms": 1,
                            "admin.retries": 2})
    common = {"security.protocol": "SSL", "retry.backoff.ms": 7, "socket.send.buffer.bytes": 1000}
    assert config.client_props("restore.consumer.") == {**common, "fetch.min.bytes": 10,
                                                        "fetch.max.bytes": 9000}
    assert config.client_props("main.consumer.") == {**common, "fetch.min.bytes": 10, "fetch.max.bytes": 5000}
    assert config.client_props("producer.") == {**common, "request.timeout.ms": 9000, "linger.ms": 1}
    assert config.client_props("admin.") == {**common, "retries": 2}


def test_topic_configs_strip_the_prefix():
    config = StreamsConfig({"application.id": "a", "topic.min.insync.replicas": 2,
                            "topic.segment.ms": "60000"})
    assert config.topic_configs() == {"min.insync.replicas": "2", "segment.ms": "60000"}


RUNTIME_KEYS_IN_A_FRESH_INTERPRETER = """
import sys
from strom.errors import ConfigError
from strom.streams.config import StreamsConfig
config = StreamsConfig({"application.id": "a", "metrics.prometheus.port": "9464",
                        "execution.mode": "microbatch",
                        "realtime.batch.duration.ms": "1000", "num.standby.replicas": 1,
                        "strom.uncaught.exception.handler": "replace_thread"})
print(config["metrics.prometheus.port"], config["execution.mode"], config["realtime.batch.duration.ms"],
      config["num.standby.replicas"], config["strom.uncaught.exception.handler"], "pyspark" in sys.modules)
bad = [("execution.mode", "batch"), ("metrics.prometheus.port", 70000), ("num.stream.threads", 0)]
for key, value in bad:
    try:
        StreamsConfig({"application.id": "a", key: value})
    except ConfigError as exc:
        print(key, "refused")
"""


def test_the_spark_runtime_keys_are_known_before_anything_imports_the_runtime():
    """One registry: a fresh interpreter that imported nothing of strom.spark (as `strom run` validating
    an app's props) knows and checks the runtime's keys."""
    result = subprocess.run([sys.executable, "-c", RUNTIME_KEYS_IN_A_FRESH_INTERPRETER], capture_output=True,
                            text=True, timeout=60, check=True)
    assert result.stdout.splitlines() == ["9464 microbatch 1000 1 REPLACE_THREAD False",
                                          "execution.mode refused", "metrics.prometheus.port refused",
                                          "num.stream.threads refused"]
