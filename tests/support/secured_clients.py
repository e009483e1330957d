"""Client calls of the security tests (strom broker's and the fidelity scenarios against secured Apache
Kafka): what a producer, a consumer or an admin is refused with, and ACL bindings."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from support.certificates import Pki

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result()


def acl(resource: ResourceType, name: str, principal: str, operation: AclOperation,
        permission: AclPermissionType = ALLOW, pattern: ResourcePatternType = LITERAL,
        host: str = "*") -> AclBinding:
    return AclBinding(resource, name, pattern, principal, host, operation, permission)


def produce_error(conf: dict[str, str], topic: str) -> KafkaError | None:
    """The delivery error of one record (None if it was written)."""
    errors: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 10_000})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    return errors[0]


def consume_error(conf: dict[str, str], topic: str, group: str) -> KafkaError | None:
    """The first error a subscribed consumer reports, None once it read a record."""
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is not None:
                return message.error()
        raise AssertionError("the consumer neither read nor failed")
    finally:
        consumer.close()


def first_error(conf: dict[str, str], seconds: float = 10.0) -> KafkaError:
    """The first error librdkafka reports for a client with `conf` other than its summary "all brokers
    are down" (it must report one)."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        admin.poll(0.2)
        causes = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
        if causes:
            return causes[0]
    raise AssertionError(f"the client was not refused with a cause: {errors}")


def describe_acls_error(bootstrap_servers: str, pki: Pki, user: str, password: str) -> str:
    """The error class kafka-python raises for DescribeAcls (confluent-kafka 2.16 returns an empty list
    when DescribeAcls answers a top-level error, so it cannot show this)."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaPythonResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, security_protocol="SASL_SSL",
                             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user,
                             sasl_plain_password=password, ssl_cafile=str(pki.ca))
    try:
        admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                      ResourcePatternFilter(KafkaPythonResourceType.ANY, None,
                                                            ACLResourcePatternType.ANY)))
    except Exception as exc:
        return type(exc).__name__
    finally:
        admin.close()
    raise AssertionError("DescribeAcls was answered without an error")


