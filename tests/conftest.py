"""Shared fixtures: one embedded strom broker (`broker`), a 3-node Apache Kafka cluster (`kafka_cluster`),
a single Apache Kafka node (`kafka_node`) and the Java oracle (`java_oracle`, Kafka Streams answering
topology specs: `make oracle` builds it), each started once for the whole test session when a test asks
for it."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from oracle.java_oracle import JavaOracle
from strom.broker import EmbeddedBroker
from support.apache_kafka import KafkaCluster

# No time-based retention pass during the session: tests write records stamped early in 1970 (window
# arithmetic is easier to read), which a pass would delete between produce and read. Retention itself
# is tested on brokers of its own (tests/broker/test_admin_ops.py).
NO_RETENTION_PASS = {"log.retention.check.interval.ms": 24 * 60 * 60 * 1000}


def pytest_configure(config: pytest.Config) -> None:
    """`make test` starts a pytest in the background of a non-interactive shell, which (as POSIX says) gives
    it SIGINT ignored; the processes the tests start would inherit that, and the Ctrl-C tests of
    `strom run` and `strom tasks run` could not stop them. Ctrl-C is restored for this process and its
    children."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def java_oracle() -> Iterator[JavaOracle]:
    oracle = JavaOracle()
    try:
        yield oracle
    finally:
        oracle.close()


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A running strom broker (separate process, temporary data dir); use `.bootstrap_servers`."""
    with EmbeddedBroker(config=NO_RETENTION_PASS) as running:
        yield running


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A 3-node Apache Kafka cluster (KRaft, combined roles) as production runs it: replication factor 3,
    min.insync.replicas 2, Kafka's own defaults otherwise (group.initial.rebalance.delay.ms 3000).
    Tests that kill or restart nodes bring them back before they end, or start a cluster of their own."""
    with KafkaCluster(tmp_path_factory.mktemp("apache-kafka"), brokers=3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One Apache Kafka node, the peer strom broker's answers are compared with."""
    with KafkaCluster(tmp_path_factory.mktemp("apache-kafka-node"), brokers=1) as cluster:
        yield cluster


@pytest.fixture(params=["strom-broker", pytest.param("apache-kafka", marks=pytest.mark.slow)])
def any_broker(request: pytest.FixtureRequest) -> EmbeddedBroker | KafkaCluster:
    """Runs a test of strom's client side twice: on the embedded broker and on the 3-node Apache Kafka
    cluster (both have ``bootstrap_servers``); the Kafka leg is marked ``slow``."""
    return request.getfixturevalue("broker" if request.param == "strom-broker" else "kafka_cluster")
