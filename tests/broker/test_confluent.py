"""confluent-kafka (librdkafka) against the strom broker: produce, consume, groups, admin."""

from __future__ import annotations

import pytest
from broker_helpers import drain, unique
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic

from strom.kafka import clients

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyed_records_with_headers_round_trip(broker, codec):
    topic = unique(f"conf-{codec}")
    clients.create_topics(broker.bootstrap_servers, {topic: 4})
    producer = clients.producer(broker.bootstrap_servers, **{"compression.type": codec})
    sent = {}
    for i in range(400):
        key = f"key-{i % 17}".encode()
        value = f"value-{i}".encode() * 3
        producer.produce(topic, key=key, value=value,
                         headers=[("n", str(i).encode()), ("codec", codec.encode())])
        sent[value] = key
    assert producer.flush(20) == 0

    consumer = clients.consumer(broker.bootstrap_servers, unique("g"))
    consumer.subscribe([topic])
    messages = drain(consumer, 400)
    consumer.close()

    assert {m.value(): m.key() for m in messages} == sent
    partitions_of_key: dict[bytes, set[int]] = {}
    for m in messages:
        partitions_of_key.setdefault(m.key(), set()).add(m.partition())
        assert dict(m.headers())["codec"] == codec.encode()
    assert all(len(p) == 1 for p in partitions_of_key.values()), "a key must map to one partition"
    assert len({m.partition() for m in messages}) > 1, "keys must spread over partitions"
    per_partition: dict[int, list[int]] = {}
    for m in messages:
        per_partition.setdefault(m.partition(), []).append(m.offset())
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets))), "offsets of a partition are contiguous from 0"


def test_committed_offsets_and_resume(broker):
    topic, group = unique("commit"), unique("g")
    clients.create_topics(broker.bootstrap_servers, {topic: 2})
    producer = clients.producer(broker.bootstrap_servers)
    for i in range(100):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
    producer.flush(10)

    first = clients.consumer(broker.bootstrap_servers, group)
    first.subscribe([topic])
    messages = drain(first, 100)
    # commit only the first 30 of each partition, then resume from there
    positions = {}
    for m in messages:
        positions.setdefault(m.partition(), 0)
    commits = [TopicPartition(topic, p, 30) for p in positions]
    first.commit(offsets=commits, asynchronous=False)
    assert [tp.offset for tp in first.committed(commits, timeout=10)] == [30] * len(commits)
    first.close()

    second = clients.consumer(broker.bootstrap_servers, group)
    second.subscribe([topic])
    rest = drain(second, 100 - 30 * len(commits))
    second.close()
    assert all(m.offset() >= 30 for m in rest)


def test_admin_describe_and_alter(broker):
    admin = clients.admin(broker.bootstrap_servers)
    topic = unique("admin")
    clients.create_topics(broker.bootstrap_servers, {topic: 1}, config={"retention.ms": "12345"})
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics[topic].partitions) == 1
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3

    resource = ConfigResource("topic", topic)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "12345"
    assert configs["cleanup.policy"].value == "delete"

    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic(topic, 1)])[topic].result(10)
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    admin.delete_topics([topic])[topic].result(10)
    assert topic not in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_0_and_1(broker, acks):
    topic = unique(f"acks{acks}")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    producer = clients.producer(broker.bootstrap_servers, **{"acks": acks, "enable.idempotence": False})
    for i in range(50):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(10) == 0
    consumer = clients.consumer(broker.bootstrap_servers, unique("g"))
    consumer.subscribe([topic])
    assert sorted(int(m.value()) for m in drain(consumer, 50)) == list(range(50))
    consumer.close()
