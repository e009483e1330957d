"""Where sources start without committed offsets (Kafka's AutoOffsetReset): a LATEST source skips what
was produced before start() and processes what comes after; an EARLIEST source (the default) reads
everything; a restart resumes from the committed offsets, whatever the policy."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition

from strom.errors import ConfigError
from strom.kafka import clients
from strom.spark.runtime import SparkStreams
from strom.streams import AutoOffsetReset, Consumed, Produced, StreamsBuilder, StreamsConfig, Topology

from .conftest import produce_lines, read_updates, run_until_caught_up
from .wordcount import S

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def merged(clicks: str, orders: str, out: str) -> Topology:
    builder = StreamsBuilder()
    latest = builder.stream(clicks, Consumed.with_(S, S).with_offset_reset_policy(AutoOffsetReset.LATEST))
    earliest = builder.stream(orders, Consumed.with_(S, S))
    latest.merge(earliest).to(out, Produced.with_(S, S))
    return builder.build()


def test_a_latest_source_skips_what_came_before_start(broker, spark, topics, tmp_path, mode_props):
    names = topics(clicks=2, orders=2, out=2)
    bootstrap = broker.bootstrap_servers
    produce_lines(bootstrap, names["clicks"], [(f"old{i}", "click") for i in range(20)])
    produce_lines(bootstrap, names["orders"], [(f"order{i}", "order") for i in range(5)])
    topology = merged(names["clicks"], names["orders"], names["out"])
    app = SparkStreams(topology, {
        "application.id": f"rt-reset-{names['clicks']}", "bootstrap.servers": bootstrap,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "commit.interval.ms": 200,
        **mode_props}, spark)
    app.start()
    try:
        assert app.plan.latest_start_topics == (names["clicks"],)
        produce_lines(bootstrap, names["clicks"], [(f"new{i}", "click") for i in range(7)])
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
    finally:
        app.stop()
    produce_lines(bootstrap, names["clicks"], [("later", "click")])  # while stopped: kept for the restart
    run_until_caught_up(spark, topology, broker, tmp_path, f"rt-reset-{names['clicks']}", **mode_props)

    out = read_updates(bootstrap, names["out"], value_serde=S)
    assert sorted(out) == sorted([f"new{i}" for i in range(7)] + [f"order{i}" for i in range(5)] + ["later"])


def test_auto_offset_reset_is_checked():
    with pytest.raises(ConfigError, match="'earliest' or 'latest'"):
        StreamsConfig({"application.id": "a", "auto.offset.reset": "none"})


def test_records_deleted_before_the_application_read_them_are_no_lag(broker, spark, topics, tmp_path,
                                                                    mode_props):
    names = topics(clicks=1, orders=1, out=1)
    bootstrap = broker.bootstrap_servers
    produce_lines(bootstrap, names["orders"], [(f"order{i}", "order") for i in range(5)])
    admin = clients.admin(bootstrap)  # kept: the future needs its client alive
    deleted = admin.delete_records([TopicPartition(names["orders"], 0, 5)])
    assert next(iter(deleted.values())).result(10).low_watermark == 5  # all gone, as retention would
    app = SparkStreams(merged(names["clicks"], names["orders"], names["out"]), {
        "application.id": f"rt-deleted-{names['orders']}", "bootstrap.servers": bootstrap,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "commit.interval.ms": 200,
        **mode_props}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(60), f"lag {app.lag()}"  # not 5: nothing is left to read
    finally:
        app.stop()
    assert read_updates(bootstrap, names["out"], value_serde=S) == {}
