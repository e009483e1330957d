"""A SparkStreams application with metrics.prometheus.port serves Kafka Streams' metric names, scraped
over HTTP while it runs: per task records processed, commits, restore, lag per partition, and state."""

from __future__ import annotations

import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.spark.runtime import SparkStreams

from .conftest import produce_lines
from .wordcount import word_count

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.broker]


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_a_running_application_serves_prometheus_metrics(broker, spark, topics, tmp_path):
    names = topics(lines=2, counts=2)
    lines = [(f"k{i}", "a b c") for i in range(40)]
    produce_lines(broker.bootstrap_servers, names["lines"], lines)
    app_id = f"metrics-{uuid.uuid4().hex[:8]}"
    app = SparkStreams(word_count(names["lines"], names["counts"]), {
        "application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "commit.interval.ms": 200,
        "metrics.prometheus.port": 0}, spark)
    app.start()
    try:
        assert app.metrics_url is not None
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        metrics = scrape(app.metrics_url)
    finally:
        app.stop()
    assert app.metrics_url is None  # stop() closes the endpoint

    processed = {s.labels["task_id"]: s.value for s in metrics["kafka_streams_stream_task_metrics_process"]
                 if s.name.endswith("_total")}
    # sub-topology 0 reads 40 lines, sub-topology 1 the 120 words they were split into
    assert sum(v for t, v in processed.items() if t.startswith("0_")) == 40
    assert sum(v for t, v in processed.items() if t.startswith("1_")) == 120
    assert all(s.labels["application_id"] == app_id
               for s in metrics["kafka_streams_stream_task_metrics_process"])
    commits = [s.value for s in metrics["kafka_streams_stream_task_metrics_commit"]
               if s.name.endswith("_total")]
    assert len(commits) == 4 and sum(commits) >= 2  # every planned task; both sub-topologies committed
    assert all(s.value >= 0 for s in metrics["kafka_streams_stream_task_metrics_commit_latency_avg"])
    assert "kafka_streams_stream_state_metrics_restore" in metrics
    lag = metrics["kafka_consumer_consumer_fetch_manager_metrics_records_lag"]
    assert {(s.labels["topic"], s.labels["partition"]) for s in lag} >= {(names["lines"], "0"),
                                                                         (names["lines"], "1")}
    assert all(s.value == 0 for s in lag)  # caught up
    (state,) = metrics["kafka_streams_stream_metrics_state"]
    assert state.labels["state"] == "RUNNING" and state.value == 1
