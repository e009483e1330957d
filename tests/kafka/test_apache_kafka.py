"""The Apache Kafka test component itself: a real KRaft cluster from Kafka's jars."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strom.kafka import clients
from support.apache_kafka import KAFKA_VERSION, KafkaCluster, coordinator_partition, java_hashcode
from support.kafka import create_topic

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "apache_kafka.py"


def test_java_hashcode_matches_java_string_hashcode() -> None:
    # Values of String.hashCode() computed by the JVM.
    assert java_hashcode("") == 0
    assert java_hashcode("hello") == 99162322
    assert java_hashcode("polygenelubricants") == -(1 << 31)
    assert java_hashcode("ä€𝄞") == 16602546  # a surrogate pair counts as two code units
    assert coordinator_partition("polygenelubricants", 50) == 0


def test_cluster_runs_kafka_4_with_replicated_internal_topics(kafka_cluster: KafkaCluster) -> None:
    assert KAFKA_VERSION.startswith("4.")
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, partitions=3)
    producer = clients.producer(bootstrap, **{"transactional.id": "support-check"})
    producer.init_transactions(60)
    metadata = kafka_cluster.admin().list_topics(timeout=10)
    assert sorted(metadata.brokers) == [0, 1, 2]
    assert all(len(p.replicas) == 3 for p in metadata.topics[topic].partitions.values())
    assert all(len(p.replicas) == 3 for p in metadata.topics["__transaction_state"].partitions.values())


def test_coordinators_are_where_kafka_says(kafka_cluster: KafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap)
    group = "support-coordinator-check"
    consumer = clients.consumer(bootstrap, group)
    consumer.subscribe([topic])
    deadline = time.monotonic() + 90
    while not consumer.assignment():  # joining waits out the creation of __consumer_offsets
        consumer.poll(0.5)
        assert time.monotonic() < deadline, "the group never got its assignment"
    consumer.close()
    admin = kafka_cluster.admin()
    description = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
    assert description.coordinator.id == kafka_cluster.group_coordinator(group)


def test_script_prints_bootstrap_first_and_stops_every_node(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, str(SCRIPT), "--brokers", "1", "--dir", str(tmp_path)],
                               stdout=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline().strip()
        assert first.startswith("bootstrap.servers=127.0.0.1:")
        bootstrap = first.split("=", 1)[1]
        assert clients.admin(bootstrap).list_topics(timeout=10).brokers
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
    time.sleep(0.5)
    java = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert java.stdout == "", "a Kafka node outlived the script"


def test_missing_jars_are_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import support.apache_kafka as apache_kafka

    monkeypatch.setattr(apache_kafka, "LIBS", tmp_path / "absent")
    with pytest.raises(apache_kafka.KafkaSetupError, match="make kafka"):
        KafkaCluster(tmp_path, brokers=1).start()
