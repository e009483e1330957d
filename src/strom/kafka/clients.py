"""The one place that builds confluent-kafka clients, so every layer configures them alike.

Keys are librdkafka's (``bootstrap.servers``, ``enable.idempotence``, ...). Callers pass
overrides; unknown keys are rejected by librdkafka itself with a clear KafkaException, which we
turn into a ConfigError naming the key.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.errors import BrokerUnavailableError, ConfigError
from strom.kafka.security import authorization_error, identity, refusal

__all__ = [
    "CONNECT_AT_ONCE", "CONSUMER_DEFAULTS", "JAVA_PARTITIONER", "PRODUCER_DEFAULTS", "UNUSED_GROUP", "admin",
    "assign",
    "check_described", "check_group_protocol", "consumer", "create_topics", "load_properties", "produce",
    "producer",
]

log = logging.getLogger(__name__)

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "none",
}
JAVA_PARTITIONER: dict[str, Any] = {"partitioner": "murmur2_random"}
"""Keyed records land where Kafka's Java clients (Kafka Streams, Decaton's client) would put them."""
CONNECT_AT_ONCE: dict[str, Any] = {"enable.sparse.connections": "false"}
"""For a short-lived client: connect to the brokers at once. With sparse connections (librdkafka's
default) a new client connects only once a request needs a broker: a new admin client's first metadata
request took 50 ms more, and init_transactions 60 ms to 0.5 s instead of 10 ms."""
UNUSED_GROUP = "strom-unused-group"
"""The group id of readers that assign partitions themselves: librdkafka needs one (and looks its
coordinator up, so a secured cluster's principal needs Describe on it: docs/deploy.md)."""
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


class _Consumer(Consumer):
    """librdkafka's consumer, keeping the ``identity`` a refusal names (``security.identity_of``)."""

    identity: dict[str, Any]


class _Producer(Producer):
    """librdkafka's producer, keeping the ``identity`` a refusal names (``security.identity_of``) and the
    topics of the records librdkafka purged from its current transaction (``purged``): a topic refused
    to AddPartitionsToTxn fails the transaction, purges its records and is named by no error, so a
    refusal names these topics instead."""

    identity: dict[str, Any]

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.purged: set[str] = set()


_KEEPING_IDENTITY: dict[type, type] = {Consumer: _Consumer, Producer: _Producer}


def _build(cls: type, config: dict) -> Any:
    try:
        client = _KEEPING_IDENTITY.get(cls, cls)(config)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(f"Invalid Kafka client configuration: {exc}. Keys are librdkafka's "
                          "(see CONFIGURATION.md of librdkafka).") from exc
    client.identity = identity(config)
    return client


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
    """A manual-commit, read_committed consumer starting from the earliest offset unless overridden.
    With ``group.protocol=consumer`` the broker must offer KIP-848's protocol (see
    ``check_group_protocol``)."""
    if group_id is not None:
        overrides = {"group.id": group_id, **overrides}
    overrides.setdefault("group.id", UNUSED_GROUP)
    check_group_protocol(bootstrap_servers, overrides)
    return _build(Consumer, _config(bootstrap_servers, CONSUMER_DEFAULTS, overrides))


def assign(consumer: Consumer, partitions: list[TopicPartition], timeout_s: float = 5.0) -> None:
    """``consumer.assign``, with the leaders of the topics known first: librdkafka fetches a partition
    (and resolves a logical offset, ``OFFSET_BEGINNING``, ``OFFSET_END``) only once it knows its leader,
    and a partition assigned before its client's first metadata answer waits for a 500 ms retry timer
    (measured: first records 0.5 s after a new consumer's assign, 4 ms with the metadata asked first;
    0.9 s for a restarted driver's threads resuming at their committed offsets). If the metadata does
    not come in ``timeout_s``, librdkafka retries alone."""
    for topic in sorted({tp.topic for tp in partitions}):
        try:
            consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            log.debug("No metadata for %s before assigning it (%s); librdkafka will ask again", topic, exc)
    consumer.assign(partitions)


_CONSUMER_GROUP_HEARTBEAT = 68


def check_group_protocol(bootstrap_servers: str, config: Mapping[str, Any]) -> None:
    """Raises ConfigError if ``group.protocol=consumer`` (KIP-848) is asked of a broker without
    ConsumerGroupHeartbeat (strom broker, Kafka before 4.0): librdkafka would wait for an assignment
    for ever, saying nothing. Only a PLAINTEXT listener is asked; a secured cluster is trusted."""
    if str(config.get("group.protocol", "classic")).lower() != "consumer":
        return
    if str(config.get("security.protocol", "plaintext")).lower() != "plaintext":
        return
    # imported here: kio's protocol classes take ~0.5 s to import, and every Spark Python worker
    # daemon and driver imports this module (docs/runtime.md#start-up)
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from strom.kafka.wire import WireClient

    with WireClient(bootstrap_servers) as client:
        answer = client.send(ApiVersionsRequest(client_software_name="strom", client_software_version="1"))
    if not any(int(api.api_key) == _CONSUMER_GROUP_HEARTBEAT for api in answer.api_keys):
        raise ConfigError(
            f"group.protocol=consumer (KIP-848) needs a broker that offers ConsumerGroupHeartbeat (Apache "
            f"Kafka 4.0 or later); the broker at {bootstrap_servers} does not (strom broker speaks the "
            "classic group protocol only). Remove group.protocol or set it to classic.")


def admin(bootstrap_servers: str, **overrides: Any) -> AdminClient:
    return _build(AdminClient, _config(bootstrap_servers, {}, overrides))


def load_properties(path: str | Path) -> dict[str, str]:
    """A Java-style ``.properties`` file (Kafka's ``--command-config``) as a dict: ``key=value``,
    ``key: value`` or ``key value``; ``#`` and ``!`` comments; a trailing backslash continues a line.
    ``sasl.jaas.config`` of a Plain or SCRAM login module becomes librdkafka's ``sasl.username`` and
    ``sasl.password``, so a Java client's file works unchanged."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Cannot read the client properties file {str(path)!r} ({exc}). Pass a readable "
                          "file of key=value lines.") from exc
    properties: dict[str, str] = {}
    for line in _logical_lines(text):
        match = _PROPERTY.match(line)
        if match is None:
            raise ConfigError(f"{str(path)!r}: cannot read {line!r} as key=value.")
        properties[match["key"]] = match["value"]
    jaas = properties.pop("sasl.jaas.config", None)
    if jaas is not None:
        properties.update(_jaas_credentials(jaas, path))
    return properties


_PROPERTY = re.compile(r"(?P<key>[^=:\s]+)\s*(?:[=:]\s*|\s+|$)(?P<value>.*)")
_JAAS_OPTION = re.compile(r"(username|password)\s*=\s*\"((?:[^\"\\\\]|\\\\.)*)\"")


def _logical_lines(text: str) -> list[str]:
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip() if not pending else raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def _jaas_credentials(jaas: str, path: str | Path) -> dict[str, str]:
    options = dict(_JAAS_OPTION.findall(jaas))
    if "username" not in options or "password" not in options:
        raise ConfigError(f"{str(path)!r}: sasl.jaas.config needs username=\"...\" and password=\"...\" "
                          "(librdkafka has no JAAS); or set sasl.username and sasl.password instead.")
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def check_described(client: AdminClient, topics: Iterable[str], settings: Mapping[str, Any],
                    operation: str = "Describe") -> None:
    """Raises AuthorizationError for the first of ``topics`` the cluster will not describe to this
    principal, naming the ``operation`` the caller needs on it (Write, Read, ... each implies Describe).
    A listing of every topic leaves out the topics a principal may not describe, so a caller that found
    a topic missing there asks for it by name before saying it does not exist."""
    for topic in topics:
        try:  # not list_topics(topic): a Metadata request naming it creates it where topics auto-create
            client.describe_topics(TopicCollection([topic]), request_timeout=10)[topic].result()
        except KafkaException as exc:
            log.debug("No description of %s (%s)", topic, exc)
            if refused := refusal(settings, exc.args[0], topic=topic, topic_operation=operation):
                raise refused from None


def create_topics(
    bootstrap_servers: str,
    topics: Mapping[str, int],
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    replication_factor: int = -1,
    settings: Mapping[str, Any] | None = None,
) -> None:
    """Creates topics (name → partition count) and waits until the cluster's metadata shows each with a
    leader for every partition; topics that already exist are fine. ``replication_factor`` -1 takes the
    broker's ``default.replication.factor``; ``settings`` are the admin client's (security, for one)."""
    client = admin(bootstrap_servers, **(settings or {}))
    futures = client.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=replication_factor, config=dict(config or {}))
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
            if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise authorization_error(settings or {}, "Topic", name, "Create", error.name()) from None
            if error.code() == KafkaError.INVALID_REPLICATION_FACTOR:
                raise ConfigError(
                    f"Could not create topic {name!r} with replication factor {replication_factor}: "
                    f"{error.str()}. Set replication.factor to at most the number of brokers, or -1 for "
                    "the broker's default."
                ) from exc
            raise
    _await_leaders(client, list(topics), timeout)


def _await_leaders(client: AdminClient, topics: list[str], timeout: float) -> None:
    """Waits until the metadata shows every partition of ``topics`` with a leader: on a cluster of several
    nodes a topic just created reaches each node's metadata a moment later, and a client asking that node
    meanwhile (an application planning its tasks) would find no such topic. Gives up quietly after
    ``timeout``: what follows then reports the topic as missing."""
    deadline = time.monotonic() + timeout
    waiting = list(topics)
    while waiting and time.monotonic() < deadline:
        try:
            known = client.list_topics(timeout=max(0.1, min(5.0, deadline - time.monotonic()))).topics
        except KafkaException:
            known = {}
        waiting = [t for t in waiting if not _led(known.get(t))]
        if waiting:
            time.sleep(0.05)


def _led(topic: Any) -> bool:
    """A topic whose every partition has a leader, or one the principal may not describe (nothing to
    wait for then)."""
    if topic is None:
        return False
    if topic.error is not None:
        return topic.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    return bool(topic.partitions) and all(p.leader >= 0 for p in topic.partitions.values())
