"""Client calls of the security tests (strom broker's and the fidelity scenarios against secured Apache
Kafka): what a producer, a consumer or an admin is refused with, and ACL bindings."""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography import x509
from cryptography.x509.oid import NameOID
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i8

from strom.kafka.wire import WireClient
from strom.streams import Serdes
from support.certificates import Pki

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
S, L = Serdes.String(), Serdes.Long()


def sasl_settings(servers: str, ca: Path | None, user: str, password: str,
                  mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    """librdkafka settings of `user` on a SASL listener: SASL_SSL trusting `ca`, SASL_PLAINTEXT without."""
    conf = {"bootstrap.servers": servers, "security.protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    return {**conf, "ssl.ca.location": str(ca)} if ca else conf


def unsecured_jws(claims: dict[str, Any], alg: str = "none", signature: str = "") -> str:
    """A JWS compact serialization of ``claims`` (unsecured with the defaults, as Kafka's
    OAuthBearerUnsecuredJws expects; the arguments make it otherwise)."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part({'alg': alg})}.{part(claims)}.{signature}"


def oauth_settings(servers: str, ca: Path, token: str) -> dict[str, Any]:
    """librdkafka settings presenting ``token`` with SASL/OAUTHBEARER on a SASL_SSL listener (the
    application's token callback, as a client with its own identity provider has)."""
    return {"bootstrap.servers": servers, "security.protocol": "SASL_SSL", "ssl.ca.location": str(ca),
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": lambda _config: (token, time.time() + 3600)}


def mtls_settings(servers: str, ca: Path, cert: Path, key: Path) -> dict[str, str]:
    """librdkafka settings of a client certificate on a mutual-TLS listener."""
    return {"bootstrap.servers": servers, "security.protocol": "SSL", "ssl.ca.location": str(ca),
            "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}


def certificate_issuer(servers: str) -> str:
    """The common name of the CA that signed the certificates the TLS listeners at ``servers`` (one, or a
    cluster's nodes: they must agree) present."""
    issuers = set()
    for server in servers.split(","):
        host, _, port = server.rpartition(":")
        pem = ssl.get_server_certificate((host, int(port)))
        issuers.add(x509.load_pem_x509_certificate(pem.encode()).issuer.get_attributes_for_oid(
            NameOID.COMMON_NAME)[0].value)
    assert len(issuers) == 1, f"the listeners at {servers} present certificates of several CAs: {issuers}"
    return issuers.pop()


def settled(ask: Callable[[], Any], wanted: Any, seconds: float = 10) -> Any:
    """``ask()`` until it answers ``wanted`` (or ``seconds`` passed): its last answer. Apache Kafka's
    controller applies an ACL or SCRAM change and its broker learns it from the metadata log a moment
    later, so a read or a use right after the change may still meet the old state."""
    deadline = time.monotonic() + seconds
    answer = ask()
    while answer != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
        answer = ask()
    return answer


EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)


class ClusterAdmin(AdminClient):
    """A super user's admin client of a cluster of several nodes (or of one). Each node learns a topic, an
    ACL or a SCRAM change from the metadata log on its own, so a change made through it settles on each
    node, asked through strom's one-connection WireClient (librdkafka would send DescribeAcls or
    DescribeUserScramCredentials to any node): a topic once each node's metadata leads each partition
    (``create_topic``), ACLs once each node's own authorizer lists them (``grant``), a SCRAM credential
    once each node describes it (``credentials_settled``), a new user once it logs in at each node alone
    (``add_user``: a fresh client bootstrapped at one node sends its first request there)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__(settings)
        self.settings = settings
        self.servers = settings["bootstrap.servers"].split(",")

    def on_each_node(self, ask: Callable[[str], Any], wanted: Any, what: str) -> None:
        """Returns once ``ask(server)`` answers ``wanted`` at each node (10 s each), else fails naming the
        node that does not, and ``what`` was asked."""
        for server in self.servers:
            answer = settled(lambda server=server: ask(server), wanted)
            assert answer == wanted, f"the node at {server} answers {answer!r} to {what}, not {wanted!r}, " \
                                     "after 10 s"

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Creates ``name`` (the cluster's default replication) once each node leads its partitions."""
        self.create_topics([NewTopic(name, partitions)])[name].result()
        self.on_each_node(lambda server: led_partitions_at(server, self.settings, name), partitions,
                          f"how many partitions of {name} have a leader")

    def credentials_settled(self, user: str, wanted: list[tuple[str, int]] | str) -> None:
        """Returns once each node describes ``user``'s SCRAM credentials as ``wanted`` (as
        ``described_credentials`` puts them)."""
        self.on_each_node(lambda server: credentials_at(server, self.settings, user), wanted,
                          f"DescribeUserScramCredentials({user})")


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    """Creates ``bindings`` and returns once the brokers enforce them (DescribeAcls answers from the
    authorizer that checks requests)."""
    for future in admin.create_acls(list(bindings)).values():
        future.result()
    if not isinstance(admin, ClusterAdmin):
        settled(lambda: set(bindings) <= set(admin.describe_acls(EVERY_ACL).result()), True)
        return
    wanted = {_acl_key(binding) for binding in bindings}
    admin.on_each_node(lambda server: wanted - acls_at(server, admin.settings), set(),
                       "which of the new ACLs its authorizer lacks")


def acls_at(server: str, settings: dict[str, Any]) -> set[tuple]:
    """The ACLs the authorizer of the node at ``server`` holds, from that node itself."""
    anything = i8(1)  # ANY, for each filter
    with WireClient(server, settings=settings) as client:
        answer = client.send(DescribeAclsRequest(
            resource_type_filter=anything, resource_name_filter=None, pattern_type_filter=anything,
            principal_filter=None, host_filter=None, operation=anything, permission_type=anything))
    assert answer.error_code == ErrorCode.none, answer
    return {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
             a.permission_type) for r in answer.resources for a in r.acls}


def led_partitions_at(server: str, settings: dict[str, Any], topic: str) -> int:
    """How many partitions of ``topic`` have a leader in the metadata of the node at ``server`` (0 while
    it does not know the topic)."""
    request = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with WireClient(server, settings=settings) as client:
        answer = client.send(request)
    return sum(partition.leader_id >= 0 for found in answer.topics if found.error_code == ErrorCode.none
               for partition in found.partitions)


def credentials_at(server: str, settings: dict[str, Any], user: str) -> list[tuple[str, int]] | str:
    """``user``'s SCRAM credentials as the node at ``server`` describes them (as
    ``described_credentials`` puts them: (mechanism, iterations), or the error's name)."""
    with WireClient(server, settings=settings) as client:
        result, = client.send(DescribeUserScramCredentialsRequest(users=(UserName(name=user),))).results
    if result.error_code != ErrorCode.none:
        return result.error_code.name.upper()
    return [(ScramMechanism(info.mechanism).name, info.iterations) for info in result.credential_infos]


def _acl_key(binding: AclBinding) -> tuple:
    """A binding as ``acls_at`` lists it (librdkafka's enums are the protocol's numbers)."""
    return (binding.restype.value, binding.name, binding.resource_pattern_type.value, binding.principal,
            binding.host, binding.operation.value, binding.permission_type.value)


def acl(resource: ResourceType, name: str, principal: str, operation: AclOperation,
        permission: AclPermissionType = ALLOW, pattern: ResourcePatternType = LITERAL,
        host: str = "*") -> AclBinding:
    return AclBinding(resource, name, pattern, principal, host, operation, permission)


def add_user(admin: AdminClient, user: str, password: str) -> None:
    """A SCRAM-SHA-512 user, added by a super user while the cluster runs."""
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          password.encode())
    admin.alter_user_scram_credentials([upsert])[user].result()
    settled(lambda: described_credentials(admin, user), [("SCRAM_SHA_512", 4096)])
    for server in admin.servers if isinstance(admin, ClusterAdmin) else []:
        login = {**admin.settings, "bootstrap.servers": server, "sasl.username": user,
                 "sasl.password": password}
        assert settled(lambda login=login: logs_in(login), True, seconds=30), \
            f"{user} cannot log in at {server} 30 s after it was added"


def logs_in(settings: dict[str, Any], timeout: float = 10) -> bool:
    """Whether a fresh client with ``settings`` logs in and reads metadata within ``timeout`` seconds."""
    try:
        AdminClient(settings).list_topics(timeout=timeout)
    except KafkaException:
        return False
    return True


def described_credentials(admin: AdminClient, user: str) -> list[tuple[str, int]] | str:
    """``user``'s SCRAM credentials (mechanism, iterations) as DescribeUserScramCredentials answers, or the
    name of its error."""
    try:
        infos = admin.describe_user_scram_credentials([user])[user].result().scram_credential_infos
    except KafkaException as exc:
        return exc.args[0].name()
    return [(i.mechanism.name, i.iterations) for i in infos]


def each(resource: ResourceType, name: str, principal: str, operations: tuple[AclOperation, ...],
         pattern: ResourcePatternType = LITERAL) -> list[AclBinding]:
    """One ALLOW binding per operation."""
    return [acl(resource, name, principal, op, pattern=pattern) for op in operations]


TOPIC, GROUP, TXN, OP = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, AclOperation


def application_acls(principal: str, app_id: str, inputs: list[str],
                     outputs: list[str]) -> dict[str, list[AclBinding]]:
    """docs/deploy.md's list for a SparkStreams application, by line of its table."""
    return {
        "input topics": [b for name in inputs
                         for b in each(TOPIC, name, principal, (OP.READ, OP.DESCRIBE))],
        "output topics": [b for name in outputs
                          for b in each(TOPIC, name, principal, (OP.WRITE, OP.DESCRIBE))],
        "internal topics": each(TOPIC, f"{app_id}-", principal, (
            OP.CREATE, OP.READ, OP.WRITE, OP.DESCRIBE, OP.DESCRIBE_CONFIGS, OP.DELETE), PREFIXED),
        "group": each(GROUP, app_id, principal, (OP.READ, OP.DESCRIBE)),
        "instances group": each(GROUP, f"{app_id}.instances", principal, (OP.READ, OP.DESCRIBE)),
        "assigning readers' group": each(GROUP, "strom-unused-group", principal, (OP.DESCRIBE,)),
        "transactional ids": each(TXN, f"{app_id}-", principal, (OP.WRITE, OP.DESCRIBE), PREFIXED),
    }


def connector_acls(principal: str, source: str, sink: str) -> dict[str, list[AclBinding]]:
    """docs/deploy.md's list for the Spark connector's source and exactly-once sink, by line."""
    return {
        "source topics": each(TOPIC, source, principal, (OP.READ, OP.DESCRIBE)),
        "assigning readers' group": each(GROUP, "strom-unused-group", principal, (OP.DESCRIBE,)),
        "sink topics": each(TOPIC, sink, principal, (OP.WRITE, OP.READ, OP.DESCRIBE)),  # Read: markers
        "sink transactional ids": each(TXN, "strom-sink-", principal, (OP.WRITE, OP.DESCRIBE), PREFIXED),
        "sink marker groups": each(GROUP, "strom-sink-", principal, (OP.READ, OP.DESCRIBE), PREFIXED),
    }


def subscription_acls(principal: str, subscription: str, topic: str) -> dict[str, list[AclBinding]]:
    """docs/deploy.md's list for a strom.tasks subscription with retries, by line of its table."""
    return {
        "input topics": each(TOPIC, topic, principal, (OP.READ, OP.DESCRIBE)),
        "group": each(GROUP, subscription, principal, (OP.READ, OP.DESCRIBE)),
        "retry topics": [b for name in (f"{topic}-retry", f"{topic}-dlq")
                         for b in each(TOPIC, name, principal, (OP.CREATE, OP.READ, OP.WRITE, OP.DESCRIBE))],
    }


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


def latest_counts(conf: dict[str, str], topic: str) -> dict[str, int]:
    """The last committed count of each word in a word count's 2-partition output topic."""
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


def connector_copy(spark: Any, client_settings: dict[str, Any], source: str, sink: str,
                   checkpoint: Path) -> None:
    """A Spark SQL query through the connector, logged in with ``client_settings`` (librdkafka's, made
    ``kafka.`` options): ``source`` read from the earliest offsets and written to ``sink`` exactly once,
    ``availableNow``; it must end without an error."""
    options = {f"kafka.{k}": v for k, v in client_settings.items()}
    events = spark.readStream.format("strom").options(**options).option("subscribe", source) \
        .option("startingOffsets", "earliest").load()
    query = (events.select("key", "value").writeStream.format("strom").options(**options)
             .option("topic", sink).option("delivery.guarantee", "exactly_once")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(240)
    assert query.exception() is None
