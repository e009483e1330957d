"""The Prometheus endpoints of `strom broker --metrics-port` and of a strom.tasks subscription, scraped
over HTTP after real traffic (confluent-kafka clients against the real broker)."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.kafka import clients
from strom.prometheus import MetricsServer
from strom.tasks import ProcessorsBuilder, SubscriptionBuilder
from strom.tasks.prometheus import SubscriptionCollector
from support.processes import STROM

pytestmark = pytest.mark.broker


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return {f.name: f.samples for f in text_string_to_metric_families(response.read().decode())}


def _value(samples: list, suffix: str = "", **labels: str) -> float:
    return sum(s.value for s in samples if s.name.endswith(suffix) and all(
        s.labels.get(k) == v for k, v in labels.items()))


def test_strom_broker_serves_request_topic_group_and_transaction_metrics(tmp_path):
    process = subprocess.Popen([STROM, "broker",
                                "--data-dir", str(tmp_path), "--port", "0", "--metrics-port", "0"],
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        lines = []
        while not (url := next((m.group(1) for line in lines
                                for m in [re.search(r"metrics at (\S+)", line)] if m), None)):
            line = process.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        bootstrap = re.search(r"listening on (\S+?)[ ,]", "".join(lines)).group(1)
        clients.create_topics(bootstrap, {"metered": 3})
        producer = clients.producer(bootstrap, **{"transactional.id": "metered-txn"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("metered", b"x" * 1000)
        producer.commit_transaction(30)
        consumer = clients.consumer(bootstrap, "metered-group")
        consumer.subscribe(["metered"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (message := consumer.poll(0.5)) is None:
            pass
        assert message is not None and message.error() is None
        consumer.commit(asynchronous=False)
        consumer.close()

        metrics = scrape(url)
        requests = metrics["kafka_network_requestmetrics_requests"]
        assert _value(requests, "_total", request="Produce") >= 1
        assert _value(requests, "_total", request="Fetch") >= 1
        assert _value(requests, "_total", request="OffsetCommit") >= 1
        assert _value(metrics["kafka_server_brokertopicmetrics_bytesin"], "_total") > 1000
        assert _value(metrics["kafka_server_brokertopicmetrics_bytesout"], "_total") > 1000
        assert _value(metrics["kafka_server_replicamanager_partitioncount"]) >= 3
        assert _value(metrics["kafka_controller_kafkacontroller_globaltopiccount"]) >= 1
        assert _value(metrics["kafka_coordinator_group_groupmetadatamanager_numgroups"]) >= 1
        assert _value(metrics["kafka_coordinator_transaction_transactions"], state="COMPLETE_COMMIT") == 1
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_strom_broker_on_a_taken_metrics_port_fails_before_making_its_data_directory(tmp_path):
    taken = MetricsServer([], 0)
    try:
        result = subprocess.run([STROM, "broker",
                                 "--data-dir", str(tmp_path / "data"), "--port", "0", "--metrics-port",
                                 str(taken.port)], capture_output=True, text=True, timeout=60)
    finally:
        taken.close()
    assert result.returncode == 2 and f"Cannot serve metrics on 127.0.0.1:{taken.port}" in result.stderr
    assert not (tmp_path / "data").exists()


def test_a_subscription_serves_decatons_metrics(broker):
    bootstrap = broker.bootstrap_servers
    topic, group = f"tasks-metrics-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    clients.create_topics(bootstrap, {topic: 2})
    producer = clients.producer(bootstrap)
    for i in range(20):
        producer.produce(topic, b"task", str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    pipeline = ProcessorsBuilder.consuming(topic).then_process(lambda context, task: None)
    with (SubscriptionBuilder.new_builder(group).processors_builder(pipeline)
          .properties({"decaton.commit.interval.ms": 100})
          .consumer_config({"bootstrap.servers": bootstrap}).build_and_start()) as subscription:
        server = MetricsServer([SubscriptionCollector(subscription)], 0)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                metrics = scrape(server.url)
                committed = metrics["decaton_offset_latest_committed"]
                if _value(committed) == 20 and len(committed) == 2:
                    break
                time.sleep(0.2)
        finally:
            server.close()
    assert _value(metrics["decaton_tasks_processed"], "_total", subscription=group) == 20
    assert {s.labels["partition"]: s.value for s in metrics["decaton_offset_latest_committed"]} == {
        "0": 10, "1": 10}
    assert _value(metrics["decaton_tasks_pending"]) == 0
    assert _value(metrics["decaton_partition_concurrency"]) == 2
    assert {s.labels["quantile"] for s in metrics["decaton_tasks_process_duration_seconds"]} == {
        "0.5", "0.99", "1.0"}
