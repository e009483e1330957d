"""strom broker's ACL authorizer with real clients: CreateAcls/DescribeAcls/DeleteAcls by a super
user, each operation refused with Kafka's error code until an ACL allows it (literal and prefixed
patterns, implied DESCRIBE, deny over allow, hosts, certificate principals), ACLs kept across a restart."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from security.conftest import PASSWORDS, mtls, sasl
from support.kafka import unique
from support.secured_clients import (
    DENY,
    PREFIXED,
    acl,
    consume_error,
    describe_acls_error,
    grant,
    produce_error,
)


def test_each_operation_is_refused_with_kafkas_error_until_an_acl_allows_it(guarded, pki):
    admin = AdminClient(sasl(guarded, pki, user="admin"))
    topic, group, txn = unique("orders"), unique("billing"), unique("txn")
    admin.create_topics([NewTopic(topic, 2)])[topic].result()
    assert produce_error(sasl(guarded, pki, user="admin"), topic) is None
    bob = sasl(guarded, pki, user="bob")
    assert produce_error(bob, topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # the coordinator is looked up first
    assert consume_error(bob, topic, group).code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    bob_admin = AdminClient(bob)
    with pytest.raises(KafkaException) as created:
        next(iter(bob_admin.create_topics([NewTopic(unique("new"), 1)]).values())).result()
    assert created.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as transactional:
        Producer({**bob, "transactional.id": txn}).init_transactions(10)
    assert transactional.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert describe_acls_error(guarded.listeners["SASL_SSL"], pki, "bob", PASSWORDS["bob"]) == (
        "ClusterAuthorizationFailedError")

    grant(admin, acl(ResourceType.TOPIC, "orders-", "User:bob", AclOperation.WRITE, pattern=PREFIXED))
    assert produce_error(bob, topic) is None  # WRITE implies DESCRIBE: metadata is answered too
    grant(admin, acl(ResourceType.GROUP, "billing-", "User:bob", AclOperation.READ, pattern=PREFIXED))
    assert consume_error(bob, topic, group).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(admin, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ))
    assert consume_error(bob, topic, group) is None
    grant(admin, acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ, DENY))
    assert consume_error(bob, topic, unique("billing")).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    grant(admin, acl(ResourceType.TRANSACTIONAL_ID, txn, "User:bob", AclOperation.WRITE))
    producer = Producer({**bob, "transactional.id": txn})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction")
    producer.commit_transaction(10)


def test_a_host_bound_acl_and_a_certificate_principal(guarded, pki):
    admin = AdminClient(sasl(guarded, pki, user="admin"))
    topic = unique("certs")
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    grant(admin, acl(ResourceType.TOPIC, topic, pki.client_principal, AclOperation.WRITE),
          acl(ResourceType.TOPIC, topic, "User:bob", AclOperation.WRITE, host="10.9.9.9"))
    assert produce_error(mtls(guarded, pki), topic) is None
    refused = produce_error(sasl(guarded, pki, user="bob"), topic)
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    log = guarded.log_path.read_text()
    assert "denied: principal User:bob from 127.0.0.1 may not" in log


def test_acls_are_described_deleted_and_kept_across_a_restart(guarded, pki):
    admin = AdminClient(sasl(guarded, pki, user="admin"))
    topic = unique("kept")
    binding = acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ)
    grant(admin, binding, acl(ResourceType.GROUP, topic, "User:alice", AclOperation.READ))
    wanted = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(wanted).result() == [binding]
    matching = AclBindingFilter(ResourceType.ANY, topic, ResourcePatternType.MATCH, "User:alice", None,
                                AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin.describe_acls(matching).result()) == 2
    with pytest.raises(KafkaException) as invalid:
        grant(admin, acl(ResourceType.TOPIC, topic, "alice-without-type", AclOperation.READ))
    assert invalid.value.args[0].code() == KafkaError.INVALID_REQUEST
    guarded.restart()
    admin = AdminClient(sasl(guarded, pki, user="admin"))
    assert admin.describe_acls(wanted).result() == [binding]
    deleted = next(iter(admin.delete_acls([wanted]).values())).result()
    assert deleted == [binding]
    assert admin.describe_acls(wanted).result() == []


def test_acl_apis_without_an_authorizer_say_security_is_disabled(secured, pki):
    assert describe_acls_error(secured.listeners["SASL_SSL"], pki, "alice", PASSWORDS["alice"]) == (
        "SecurityDisabledError")


def test_partitions_of_a_topic_a_consumer_may_not_read_are_refused_in_fetch(guarded, pki):
    admin = AdminClient(sasl(guarded, pki, user="admin"))
    topic = unique("assigned")
    admin.create_topics([NewTopic(topic, 1)])[topic].result()
    group = unique("g")  # librdkafka looks its coordinator up even for assigned partitions
    grant(admin, acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.DESCRIBE),
          acl(ResourceType.GROUP, group, "User:alice", AclOperation.READ))
    consumer = Consumer({**sasl(guarded, pki), "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        error = None
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                error = message.error()
                break
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()
