"""strom.kafka's admin helpers on the 3-node Apache Kafka cluster: the topics strom creates (internal,
retry, dead letter) take the brokers' default.replication.factor (-1) or the factor asked for."""

from __future__ import annotations

import pytest

from strom.errors import ConfigError
from strom.kafka import clients
from support.apache_kafka import KafkaCluster
from support.kafka import unique

pytestmark = pytest.mark.slow


def _replicas(cluster: KafkaCluster, topic: str) -> list[int]:
    partitions = cluster.admin().list_topics(topic, timeout=30).topics[topic].partitions
    return [len(partitions[p].replicas) for p in sorted(partitions)]


def test_create_topics_replicates_by_the_broker_default_or_as_asked(kafka_cluster: KafkaCluster) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    default, three, two = unique("rf-default"), unique("rf-3"), unique("rf-2")
    clients.create_topics(bootstrap, {default: 2}, config={"cleanup.policy": "compact"})
    clients.create_topics(bootstrap, {three: 1}, replication_factor=3)
    clients.create_topics(bootstrap, {two: 1}, replication_factor=2)
    clients.create_topics(bootstrap, {default: 2})  # already there: fine
    assert _replicas(kafka_cluster, default) == [3, 3]
    assert _replicas(kafka_cluster, three) == [3]
    assert _replicas(kafka_cluster, two) == [2]
    with pytest.raises(ConfigError, match=r"replication factor 4: .*Set replication.factor to at most the "
                                          r"number of brokers, or -1"):
        clients.create_topics(bootstrap, {unique("rf-4"): 1}, replication_factor=4)
