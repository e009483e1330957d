"""DecatonClient against the real strom broker, consumed by a ProcessorSubscription: metadata, key
partitioning, scheduled tasks, clear errors."""

from __future__ import annotations

import json
import threading
import time

import pytest

from strom.errors import ConfigError, SerializationError
from strom.kafka.schema_registry import GenericAvroSerde
from strom.tasks import DecatonClient, ProcessorsBuilder, SubscriptionBuilder
from support.kafka import create_topic, unique, wait_for

pytestmark = pytest.mark.broker


def client(bootstrap: str, topic: str) -> DecatonClient[dict]:
    return (DecatonClient.producing(topic, lambda task: json.dumps(task).encode())
            .application_id("shop").instance_id("web-1")
            .producer_config({"bootstrap.servers": bootstrap}).build())


def subscribe(bootstrap: str, topic: str, process):
    return (SubscriptionBuilder.new_builder(unique("client"))
            .processors_builder(ProcessorsBuilder.consuming(topic, json.loads).then_process(process))
            .properties({"decaton.commit.interval.ms": 100})
            .consumer_config({"bootstrap.servers": bootstrap}).build_and_start())


def test_tasks_put_by_the_client_reach_processors_with_their_metadata(broker):
    topic = create_topic(broker.bootstrap_servers, 3)
    seen, lock = [], threading.Lock()

    def process(context, task):
        with lock:
            seen.append((context.key(), task, context.metadata()))

    with client(broker.bootstrap_servers, topic) as tasks:
        results = [tasks.put(f"user-{i % 4}", {"n": i}, timestamp_ms=1_000 + i) for i in range(20)]
        placed = [r.result(timeout=30) for r in results]
    by_key = {}
    for i, result in enumerate(placed):  # a key always lands on one partition, offsets rise
        by_key.setdefault(f"user-{i % 4}", set()).add(result.partition)
        assert result.topic == topic and result.offset >= 0
    assert all(len(partitions) == 1 for partitions in by_key.values())

    subscription = subscribe(broker.bootstrap_servers, topic, process)
    try:
        assert wait_for(lambda: len(seen) == 20)
    finally:
        subscription.close()
    key, _, metadata = next(entry for entry in seen if entry[1] == {"n": 5})
    assert key == b"user-1"
    assert (metadata.source_application_id, metadata.source_instance_id) == ("shop", "web-1")
    assert (metadata.timestamp_ms, metadata.retry_count, metadata.due_ms) == (1_005, 0, 0)
    assert metadata.partition == placed[5].partition and metadata.offset == placed[5].offset


def test_a_scheduled_task_waits_for_its_time_and_holds_its_key_order(broker):
    topic = create_topic(broker.bootstrap_servers, 1)
    processed = []

    def process(context, task):
        processed.append((task["n"], time.time()))

    scheduled_ms = int(time.time() * 1000) + 800
    with client(broker.bootstrap_servers, topic) as tasks:
        tasks.put("k", {"n": 1}, scheduled_time_ms=scheduled_ms)
        tasks.put("k", {"n": 2})  # same key, same unit: after the first
    subscription = subscribe(broker.bootstrap_servers, topic, process)
    try:
        assert wait_for(lambda: len(processed) == 2)
    finally:
        subscription.close()
    assert [n for n, _ in processed] == [1, 2]
    assert processed[0][1] * 1000 >= scheduled_ms


def test_client_mistakes_are_clear_errors(broker):
    topic = create_topic(broker.bootstrap_servers, 1)
    builder = DecatonClient.producing(topic, lambda task: json.dumps(task).encode())
    with pytest.raises(ConfigError, match="application id"):
        builder.producer_config({"bootstrap.servers": broker.bootstrap_servers}).build()
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        DecatonClient.producing(topic, str.encode).application_id("shop").build()
    with pytest.raises(ConfigError, match="serializer"):
        DecatonClient.producing(topic, "not a function")
    with client(broker.bootstrap_servers, topic) as tasks, pytest.raises(SerializationError, match="set"):
        tasks.put("k", {"n": {1, 2}})  # a set is not JSON
    with pytest.raises(ConfigError, match="Invalid Kafka client configuration"):
        (DecatonClient.producing(topic, str.encode).application_id("shop")
         .producer_config({"bootstrap.servers": broker.bootstrap_servers, "no.such.setting": 1}).build())


def test_schema_registry_serdes_serve_as_client_serializer_and_subscription_deserializer(broker):
    topic = create_topic(broker.bootstrap_servers, 1)
    schema = {"type": "record", "name": "Mail", "fields": [{"name": "to", "type": "string"}]}
    serde = GenericAvroSerde({"schema.registry.url": f"mock://{topic}"}, schema)
    seen = []
    with (DecatonClient.producing(topic, serde).application_id("shop")
          .producer_config({"bootstrap.servers": broker.bootstrap_servers}).build()) as tasks:
        tasks.put("k", {"to": "a@example.com"}).result(timeout=30)
    subscription = (SubscriptionBuilder.new_builder(unique("sr"))
                    .processors_builder(ProcessorsBuilder.consuming(topic, serde)
                                        .then_process(lambda context, task: seen.append(task)))
                    .consumer_config({"bootstrap.servers": broker.bootstrap_servers}).build_and_start())
    try:
        assert wait_for(lambda: seen)
    finally:
        subscription.close()
    assert seen == [{"to": "a@example.com"}]
