"""The ACLs docs/deploy.md lists for a strom application are enough: a SparkStreams application
(exactly_once_v2, a repartition topic and a changelogged store, its internal topics created by strom)
runs on a secured strom broker with the authorizer on and only those ACLs for its principal."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourceType

from security.conftest import sasl, start_secured
from strom.broker import EmbeddedBroker
from strom.streams import Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder, Topology
from support.secured_clients import PREFIXED, acl, grant

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]
S, L = Serdes.String(), Serdes.Long()


def application_acls(principal: str, app_id: str, inputs: list[str], outputs: list[str]) -> list:
    """docs/deploy.md's list for a SparkStreams application, line by line."""
    topic, group, txn = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
    return [
        *(acl(topic, name, principal, op)
          for name in inputs for op in (AclOperation.READ, AclOperation.DESCRIBE)),
        *(acl(topic, name, principal, op)
          for name in outputs for op in (AclOperation.WRITE, AclOperation.DESCRIBE)),
        *(acl(topic, f"{app_id}-", principal, op, pattern=PREFIXED)
          for op in (AclOperation.CREATE, AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE,
                     AclOperation.DESCRIBE_CONFIGS, AclOperation.DELETE)),
        *(acl(group, name, principal, op)
          for name in (app_id, f"{app_id}.instances") for op in (AclOperation.READ, AclOperation.DESCRIBE)),
        acl(group, "strom-unused-group", principal, AclOperation.DESCRIBE),
        *(acl(txn, f"{app_id}-", principal, op, pattern=PREFIXED)
          for op in (AclOperation.WRITE, AclOperation.DESCRIBE)),
    ]


def word_count(lines: str, counts: str) -> Topology:
    builder = StreamsBuilder()
    (builder.stream(lines, Consumed.with_(S, S))
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, Grouped.as_("words").with_key_serde(S).with_value_serde(S))
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to(counts, Produced.with_(S, L)))
    return builder.build()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[EmbeddedBroker]:
    broker = start_secured(tmp_path_factory.mktemp("acl-list"), pki, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def spark():
    import strom.spark
    session = strom.spark.session(app_name="strom-acl-list", log_level="ERROR")
    yield session
    session.stop()


def latest_counts(conf: dict[str, str], topic: str) -> dict[str, int]:
    consumer = Consumer({**conf, "group.id": "reader", "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    counts, ended, deadline = {}, set(), time.monotonic() + 60
    try:
        while len(ended) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                ended.add(message.partition())
                continue
            counts[S.deserializer().deserialize(topic, message.key())] = L.deserializer().deserialize(
                topic, message.value())
    finally:
        consumer.close()
    return counts


def test_the_documented_acls_run_an_exactly_once_application(guarded, pki, spark, tmp_path):
    from strom.spark.runtime import SparkStreams
    suffix = uuid.uuid4().hex[:8]
    lines, counts, app_id = f"lines-{suffix}", f"counts-{suffix}", f"wc-{suffix}"
    admin_conf = sasl(guarded, pki, user="admin")
    admin = AdminClient(admin_conf)
    for future in admin.create_topics([NewTopic(lines, 2), NewTopic(counts, 2)]).values():
        future.result()
    grant(admin, *application_acls("User:alice", app_id, [lines], [counts]))
    text = [f"w{i % 7} w{i % 3}" for i in range(120)]
    producer = Producer(admin_conf)
    for i, line in enumerate(text):
        producer.produce(lines, line.encode(), key=f"k{i}".encode())
    assert producer.flush(30) == 0
    app = SparkStreams(word_count(lines, counts), {
        "application.id": app_id, "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path),
        "commit.interval.ms": 200, "execution.mode": "microbatch", **sasl(guarded, pki, user="alice")}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(240), f"lag {app.lag()}"
    finally:
        app.stop()
    assert latest_counts(admin_conf, counts) == dict(Counter(word for line in text for word in line.split()))


@pytest.mark.parametrize("missing", ["transactional-id", "internal-topics"])
def test_without_one_line_the_application_fails_with_a_clear_error(guarded, pki, spark, tmp_path, missing):
    from strom.spark.runtime import SparkStreams
    suffix = uuid.uuid4().hex[:8]
    lines, counts, app_id = f"lines-{suffix}", f"counts-{suffix}", f"wc-{suffix}"
    admin_conf = sasl(guarded, pki, user="admin")
    admin = AdminClient(admin_conf)
    for future in admin.create_topics([NewTopic(lines, 2), NewTopic(counts, 2)]).values():
        future.result()
    kind = ResourceType.TRANSACTIONAL_ID if missing == "transactional-id" else ResourceType.TOPIC
    kept = [b for b in application_acls("User:alice", app_id, [lines], [counts])
            if not (b.restype == kind and b.name == f"{app_id}-")]
    grant(admin, *kept)
    producer = Producer(admin_conf)
    producer.produce(lines, b"a b c", key=b"k")
    assert producer.flush(30) == 0
    app = SparkStreams(word_count(lines, counts), {
        "application.id": app_id, "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path),
        "commit.interval.ms": 200, "execution.mode": "microbatch", **sasl(guarded, pki, user="alice")}, spark)
    started = time.monotonic()
    with pytest.raises(Exception) as failed:
        app.start()
        app.wait_until_caught_up(120)
    app.stop()
    assert time.monotonic() - started < 120  # refused at once, not retried until a timeout
    wanted = (f"User:alice may not Write TransactionalId '{app_id}-0_" if missing == "transactional-id"
              else f"User:alice may not Create Topic '{app_id}-")
    assert wanted in str(failed.value)
