"""A missing ACL met after start-up is named, with the principal, wherever it surfaces: a record an
output topic refuses (a stream task's sink: the task fails with the principal and the ACL to add, even
under a handler that drops failed records, as Kafka Streams counts security errors fatal), and a reader
of strom.kafka.reading (restores, standbys, store copies, global tables) whose group's coordinator is
refused. Real clients against the secured strom broker with its authorizer on. Each client strom builds
keeps what such a refusal names (its login without secrets, group, transactional id)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from security.conftest import sasl
from strom.kafka import clients
from strom.kafka.reading import end_consumer, read_to_end
from strom.kafka.security import AuthorizationError, identity_of
from strom.spark.runtime.producer_sink import ProducerSink
from strom.streams.errors import LogAndContinueProductionExceptionHandler
from strom.streams.processor.internals.collector import RecordCollector
from support.kafka import produce, unique
from support.secured_clients import GROUP, OP, PREFIXED, TOPIC, TXN, each, grant

REFUSED_WITHIN_S = 20


def _topic(guarded, pki) -> tuple[dict[str, str], str]:
    """Alice's settings and a new topic with one record (alice holds no ACL on it yet)."""
    admin_conf = sasl(guarded, pki, user="admin")
    admin = AdminClient(admin_conf)
    topic = unique("out")
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    produce(admin_conf.pop("bootstrap.servers"), topic, [(b"k", b"v")], **admin_conf)
    return sasl(guarded, pki), topic


def _send_one(sink: ProducerSink, topic: str) -> None:
    collector = RecordCollector(sink, LogAndContinueProductionExceptionHandler(), "0_1")
    collector.send_bytes(topic, 0, b"k", b"v", int(time.time() * 1000))
    collector.flush()


@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "exactly_once_v2"])
def test_a_record_its_output_topic_refuses_fails_the_task_naming_the_principal(guarded, pki, transactional):
    alice, topic = _topic(guarded, pki)
    app = unique("app")
    grant(AdminClient(sasl(guarded, pki, user="admin")),
          *each(TXN, f"{app}-", "User:alice", (OP.WRITE, OP.DESCRIBE), PREFIXED),
          *each(TOPIC, f"{app}-", "User:alice", (OP.WRITE, OP.DESCRIBE), PREFIXED),  # its internal topics
          *each(TOPIC, topic, "User:alice", (OP.DESCRIBE,)))
    sink = ProducerSink.own(alice.pop("bootstrap.servers"), {**alice, "message.timeout.ms": 15_000},
                            f"{app}-0_1" if transactional else None, "Stream task 0_1")
    started = time.monotonic()
    if sink.transactions is not None:
        sink.transactions.init_transactions()
        sink.transactions.begin_transaction()
    with pytest.raises(AuthorizationError) as refused:
        _send_one(sink, topic)
        if sink.transactions is not None:  # a stream task's commit, as the runtime makes it after a flush
            sink.transactions.commit_transaction()
    assert time.monotonic() - started < REFUSED_WITHIN_S
    # under exactly-once the transaction's commit says it (a refused AddPartitionsToTxn fails the
    # transaction and purges its records without naming the topic)
    task = "" if transactional else "Task 0_1 could not send a record: "
    assert str(refused.value).startswith(
        f"{task}User:alice may not Write Topic '{topic}' (TOPIC_AUTHORIZATION_FAILED): an administrator "
        f"grants it with kafka-acls --add --allow-principal User:alice --operation Write --topic {topic}")
    assert "\n" not in str(refused.value)


def _read(alice: dict[str, str], topic: str) -> list[bytes]:
    consumer = end_consumer(alice["bootstrap.servers"], **{k: v for k, v in alice.items()
                                                              if k != "bootstrap.servers"})
    try:
        return [m.value() for m in read_to_end(consumer, [TopicPartition(topic, 0, OFFSET_BEGINNING)],
                                                f"changelog {topic}-0")]
    finally:
        consumer.close()


def test_a_reader_whose_group_is_refused_names_the_principal_and_the_group(guarded, pki):
    alice, topic = _topic(guarded, pki)
    admin = AdminClient(sasl(guarded, pki, user="admin"))
    grant(admin, *each(TOPIC, topic, "User:alice", (OP.READ,)))
    started = time.monotonic()
    with pytest.raises(AuthorizationError) as refused:
        _read(alice, topic)
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert str(refused.value).startswith(
        "User:alice may not Describe Group 'strom-unused-group' (GROUP_AUTHORIZATION_FAILED): an "
        "administrator grants it with kafka-acls --add --allow-principal User:alice --operation Describe "
        "--group strom-unused-group")
    grant(admin, *each(GROUP, "strom-unused-group", "User:alice", (OP.DESCRIBE,)))  # docs/deploy.md's line
    assert _read(alice, topic) == [b"v"]


def test_a_client_keeps_who_it_is_but_not_its_secrets():
    login = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
             "sasl.password": "alice-pw-7Qx", "ssl.key.password": "key-pw"}
    consumer = clients.consumer("127.0.0.1:9", group_id="billing", **login)
    producer = clients.producer("127.0.0.1:9", **{**login, "transactional.id": "app-0_1"})
    try:
        assert identity_of(consumer) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                         "sasl.username": "alice", "group.id": "billing"}
        kept = repr(identity_of(producer))
        assert "'transactional.id': 'app-0_1'" in kept
        assert "alice-pw-7Qx" not in kept and "key-pw" not in kept
    finally:
        consumer.close()
