"""The one place that builds confluent-kafka clients, so every layer configures them alike.

Keys are librdkafka's (``bootstrap.servers``, ``enable.idempotence``, ...). Callers pass
overrides; unknown keys are rejected by librdkafka itself with a clear KafkaException, which we
turn into a ConfigError naming the key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from strom.errors import BrokerUnavailableError, ConfigError

log = logging.getLogger(__name__)

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "none",
}
JAVA_PARTITIONER: dict[str, Any] = {"partitioner": "murmur2_random"}
"""Keyed records land where Kafka's Java clients (Kafka Streams, Decaton's client) would put them."""
CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "enable.partition.eof": False,
    # librdkafka pauses fetching this long whenever its queue passes queued.min.messages (default
    # 1 s): a reader that drains the queue as fast as it fills (a restore, a store copy catching up)
    # then waits a second at every refill and reads at a quarter of the broker's pace.
    "fetch.queue.backoff.ms": 10,
}


def _config(bootstrap_servers: str, defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict:
    config = {"bootstrap.servers": bootstrap_servers, **defaults, **overrides}
    config.setdefault("logger", logging.getLogger("strom.kafka.librdkafka"))
    return config


def _build(cls: type, config: dict) -> Any:
    try:
        return cls(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(f"Invalid Kafka client configuration: {exc}. Keys are librdkafka's "
                          "(see CONFIGURATION.md of librdkafka).") from exc


def producer(bootstrap_servers: str, **overrides: Any) -> Producer:
    """An idempotent, acks=all producer unless overridden (``transactional.id`` makes it transactional)."""
    return _build(Producer, _config(bootstrap_servers, PRODUCER_DEFAULTS, overrides))


def produce(producer: Producer, topic: str, value: bytes | None, key: bytes | None = None,
            **kwargs: Any) -> None:
    """``producer.produce``, waiting while librdkafka's queue is full (BufferError): it serves delivery
    reports, which free the queue, and tries again."""
    while True:
        try:
            producer.produce(topic, value, key, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def consumer(bootstrap_servers: str, group_id: str | None = None, **overrides: Any) -> Consumer:
    """A manual-commit, read_committed consumer starting from the earliest offset unless overridden."""
    if group_id is not None:
        overrides = {"group.id": group_id, **overrides}
    overrides.setdefault("group.id", "strom-unused-group")
    return _build(Consumer, _config(bootstrap_servers, CONSUMER_DEFAULTS, overrides))


def admin(bootstrap_servers: str, **overrides: Any) -> AdminClient:
    return _build(AdminClient, _config(bootstrap_servers, {}, overrides))


def create_topics(
    bootstrap_servers: str,
    topics: Mapping[str, int],
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Creates topics (name → partition count) and waits; topics that already exist are fine."""
    client = admin(bootstrap_servers)
    futures = client.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1, config=dict(config or {}))
         for name, n in topics.items()],
        request_timeout=timeout,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if error.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                raise BrokerUnavailableError(
                    f"Could not create topic {name!r}: no broker answered at {bootstrap_servers} "
                    f"({error.str()}). Start one with `strom broker` or check bootstrap.servers."
                ) from exc
            raise
