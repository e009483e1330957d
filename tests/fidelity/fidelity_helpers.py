"""Helpers of the fidelity suite (issue 31): each scenario runs the same client actions against one
Apache Kafka node (`kafka_node`) and strom broker (`broker`) and compares what a client observes.

A scenario is a function of a `Target` returning a plain observation (numbers, error names, lists);
`peers.same(scenario)` runs it on both brokers at once (threads: waits overlap) and asserts the two
observations are equal after normalising what legitimately differs (the topic names, each run's own).
A documented difference (docs/broker.md, "Differences from Apache Kafka") is asserted explicitly
with `peers.both(scenario)`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.kafka import clients
from strom.kafka.wire import WireClient


@dataclass
class Target:
    """One broker under test, as a scenario sees it."""

    name: str
    bootstrap_servers: str
    node_id: int
    admin: AdminClient
    _names: dict[str, str] = field(default_factory=dict)

    def name_of(self, label: str) -> str:
        """A fresh name for this run (topics, groups, transactional ids); `normalise` maps it back."""
        real = f"fid-{label}-{uuid.uuid4().hex[:8]}"
        self._names[real] = label
        return real

    def topic(self, label: str, partitions: int = 1, **configs: str) -> str:
        name = self.name_of(label)
        futures = self.admin.create_topics([NewTopic(name, partitions, 1, config=configs)])
        futures[name].result(30)
        self.wait_for_topic(name, partitions)
        return name

    def wait_for_topic(self, name: str, partitions: int) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = self.admin.list_topics(name, timeout=10).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions and all(
                    p.leader >= 0 for p in topic.partitions.values()):
                return
            time.sleep(0.1)
        raise AssertionError(f"topic {name} did not appear on {self.name}")

    def metadata_settled(self) -> None:
        """Returns once this broker serves every metadata change made before the call. A Kafka broker
        applies the controller's records a moment after the admin call that wrote them returned (a
        describe right after an alter may still see the old config), and in log order: a topic created
        now and listed means all earlier changes are applied."""
        self.topic("barrier")

    def producer(self, **overrides: Any) -> Producer:
        return clients.producer(self.bootstrap_servers, **overrides)

    def consumer(self, group: str | None = None, **overrides: Any) -> Consumer:
        return clients.consumer(self.bootstrap_servers, group, **overrides)

    def wire(self) -> WireClient:
        return WireClient(self.bootstrap_servers)

    def normalise(self, value: Any) -> Any:
        if isinstance(value, str):
            for real, label in self._names.items():
                value = value.replace(real, f"<{label}>")
            return value
        if isinstance(value, dict):
            return {self.normalise(k): self.normalise(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.normalise(v) for v in value)
        return value


Scenario = Callable[[Target], Any]


class Peers:
    def __init__(self, kafka: Target, strom: Target) -> None:
        self.kafka = kafka
        self.strom = strom

    def both(self, scenario: Scenario) -> tuple[Any, Any]:
        """(Kafka's observation, strom's observation), both normalised."""
        with ThreadPoolExecutor(2) as pool:
            on_kafka = pool.submit(scenario, self.kafka)
            on_strom = pool.submit(scenario, self.strom)
            kafka, strom = on_kafka.result(), on_strom.result()
        return self.kafka.normalise(kafka), self.strom.normalise(strom)

    def same(self, scenario: Scenario) -> Any:
        kafka, strom = self.both(scenario)
        assert strom == kafka, f"strom broker answers\n  {strom}\nApache Kafka answers\n  {kafka}"
        return kafka


def target(name: str, bootstrap_servers: str) -> Target:
    admin = clients.admin(bootstrap_servers)
    node_id = admin.list_topics(timeout=30).controller_id
    return Target(name, bootstrap_servers, node_id, admin)


def warm_up(target: Target) -> None:
    """A first group and a first transaction on a fresh Kafka node wait for __consumer_offsets and
    __transaction_state to be created and loaded; done once here, not inside a timed scenario."""
    topic = target.topic("warm-up")
    producer = target.producer(**{"transactional.id": target.name_of("warm-up")})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"x")
    producer.commit_transaction(60)
    consumer = target.consumer(target.name_of("warm-up"))
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            consumer.commit(message, asynchronous=False)
            break
    consumer.close()


def error_name(exc: BaseException) -> str:
    """The Kafka error a client raised, by name (KafkaException) or the exception's class."""
    if isinstance(exc, KafkaException):
        return exc.args[0].name()
    return type(exc).__name__
