"""Secured fidelity: the same client calls against a secured 3-node Apache Kafka cluster (SASL_SSL
SCRAM-SHA-512, mutual TLS, StandardAuthorizer with allow.everyone.if.no.acl.found=false; replication and
the KRaft quorum over mutual TLS, topics replicated 3 times, min.insync.replicas 2) and a secured strom
broker give the same error codes: refused logins, each operation refused until an ACL allows it, what ACLs
allow, certificate principals, the SCRAM credential APIs, and OAUTHBEARER tokens judged by both
validators (unsecured JWS; signed by a throwaway identity provider's key), and Kafka's per-listener keys
(a listener's own certificate, JAAS configs) given alike to both, and listed alike by DescribeConfigs.

Each node of the cluster learns a topic, an ACL or a SCRAM change from the metadata log on its own, a
moment after the call that made it returned: a scenario goes on only once every node has it
(``ClusterAdmin``), so a client reaching any node meets the same state. What a cluster answers otherwise
than one strom broker is not compared: a topic's replicas (3 on Kafka, 1 on strom broker) and the node
ids; every client call here gets the same answer from both (a produce with acks=all is written on 2 of
3 replicas at least, as min.insync.replicas asks)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from security.conftest import PASSWORDS, oauth_listener, start_secured
from support.apache_kafka import KafkaCluster, KafkaSecurity
from support.certificates import Pki, make_pki
from support.identity_provider import AUDIENCE, ISSUER, IdentityProvider
from support.kafka import unique
from support.secured_clients import (
    DENY,
    PREFIXED,
    ClusterAdmin,
    acl,
    certificate_issuer,
    consume_error,
    describe_acls_error,
    described_credentials,
    first_error,
    grant,
    mtls_settings,
    oauth_settings,
    produce_error,
    sasl_settings,
    unsecured_jws,
)

pytestmark = pytest.mark.slow


@dataclass
class Side:
    """One secured broker as its clients see it."""

    name: str
    sasl_servers: str
    tls_servers: str
    oauth_servers: str  # OAUTHBEARER tokens signed by the identity provider's key
    pki: Pki

    def sasl(self, user: str, password: str | None = None) -> dict[str, str]:
        return sasl_settings(self.sasl_servers, self.pki.ca, user,
                             PASSWORDS.get(user, "") if password is None else password)

    def mtls(self, cert: Path, key: Path) -> dict[str, str]:
        return mtls_settings(self.tls_servers, self.pki.ca, cert, key)

    def admin(self) -> ClusterAdmin:
        """The super user's admin client, whose changes settle on each node."""
        return ClusterAdmin(self.sasl("admin"))

    def topic(self, prefix: str, partitions: int = 1) -> str:
        """A new topic, known to each node."""
        name = unique(prefix)
        self.admin().create_topic(name, partitions)
        return name


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    with IdentityProvider() as provider:
        yield provider


PLAIN_USERS = {"carol": "carol-jaas-pw"}


def same_listener_keys(pki: Pki) -> dict[str, str]:
    """Kafka's per-listener keys both brokers take: the OAUTH listener's own certificate (from another
    CA), PLAIN on SASL_SSL with its JAAS users, and the unsecured OAUTHBEARER validator's JAAS options."""
    users = " ".join(f'user_{name}="{password}"' for name, password in PLAIN_USERS.items())
    return {
        "listener.name.oauth.ssl.keystore.location": str(pki.other_broker),
        "listener.name.oauth.ssl.truststore.location": str(pki.ca),  # the broker's own: changes nothing
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER,PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            # the broker's own login (a client's token; Kafka makes one once the module has options)
            'unsecuredLoginStringClaim_sub="broker" '
            'unsecuredValidatorPrincipalClaimName="user" unsecuredValidatorRequiredScope="kafka";',
    }


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory, idp: IdentityProvider) -> Iterator[tuple[Side, Side]]:
    pki = make_pki(tmp_path_factory.mktemp("secured-pki"))
    security = KafkaSecurity(pki, PASSWORDS, jwks_url=idp.jwks_url, jwks_audience=AUDIENCE,
                             jwks_issuer=ISSUER, listener_keys=same_listener_keys(pki))
    kafka = KafkaCluster(tmp_path_factory.mktemp("secured-kafka"), brokers=3, security=security)
    with ThreadPoolExecutor(1) as pool:
        kafka_started = pool.submit(kafka.start)  # the nodes start while strom broker does
        try:
            # one strom broker, its listeners configured by the same per-listener keys as Kafka's
            strom = start_secured(tmp_path_factory.mktemp("secured-strom"), pki, **{
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:admin", **oauth_listener(security.oauth_listener()),
                **same_listener_keys(pki)})
            try:
                kafka_started.result()
                yield (Side("apache-kafka", kafka.bootstrap_servers, kafka.ssl_bootstrap_servers,
                            kafka.oauth_bootstrap_servers, pki),
                       Side("strom-broker", strom.listeners["SASL_SSL"], strom.listeners["SSL"],
                            strom.listeners["OAUTH"], pki))
            finally:
                strom.stop()
        finally:
            kafka_started.exception()  # the start has ended, whether it failed or not
            kafka.stop()


def same(sides: tuple[Side, Side], scenario: Callable[[Side], Any]) -> Any:
    with ThreadPoolExecutor(2) as pool:
        kafka, strom = pool.map(scenario, sides)
    assert strom == kafka, f"strom broker answers\n  {strom}\nApache Kafka answers\n  {kafka}"
    return kafka


def _name(error: Any) -> str | None:
    return None if error is None else error.name()


def _raised(call: Callable[[], Any]) -> str | None:
    try:
        call()
    except KafkaException as exc:
        return exc.args[0].name()
    return None


def test_refused_logins(sides):
    def scenario(side: Side) -> list[Any]:
        wrong = first_error(side.sasl("alice", password="wrong"))
        unknown = first_error(side.sasl("mallory", password="x"))
        stranger = _raised(lambda: AdminClient(side.mtls(side.pki.stranger_cert, side.pki.stranger_key))
                           .list_topics(timeout=5))
        return [wrong.name(), "Authentication failed" in wrong.str(), unknown.name(), stranger is not None]
    assert same(sides, scenario) == ["_AUTHENTICATION", True, "_AUTHENTICATION", True]


def test_oauthbearer_tokens_are_judged_as_kafkas_unsecured_jws_validator_does(sides):
    """SASL/OAUTHBEARER with Kafka's default validator, its JAAS options naming the principal claim
    (``user``) and a required scope (``kafka``): the token's ``user`` is the principal (admin, the super
    user, sees every topic; bob sees none and may not produce); an expired, signed, ``alg``-bearing,
    ``user``-less (a ``sub`` only), scope-less or expiry-less token is refused at login."""
    now = time.time()

    def scenario(side: Side) -> list[Any]:
        def settings(**claims: Any) -> dict[str, Any]:
            return oauth_settings(side.sasl_servers, side.pki.ca, unsecured_jws(claims))
        topic = side.topic("oauth")
        admin, bob = (AdminClient(settings(user=name, scope=["kafka"], exp=now + 600, iat=now))
                      for name in ("admin", "bob"))
        for client in (admin, bob):
            client.poll(1)  # serves the token callback
        listed = [topic in client.list_topics(timeout=10).topics for client in (admin, bob)]
        refused = _name(produce_error(settings(user="bob", scope=["kafka"], exp=now + 600), topic))
        logins = [first_error(oauth_settings(side.sasl_servers, side.pki.ca, token)).name() for token in (
            unsecured_jws({"user": "admin", "scope": ["kafka"], "exp": now - 600}),
            unsecured_jws({"user": "admin", "scope": ["kafka"], "exp": now + 600}, signature="c2ln"),
            unsecured_jws({"user": "admin", "scope": ["kafka"], "exp": now + 600}, alg="HS256"),
            unsecured_jws({"sub": "admin", "scope": ["kafka"], "exp": now + 600}),
            unsecured_jws({"user": "admin", "exp": now + 600}),
            unsecured_jws({"user": "admin", "scope": ["kafka"]}))]
        return [listed, refused, logins]
    assert same(sides, scenario) == [[True, False], "TOPIC_AUTHORIZATION_FAILED", ["_AUTHENTICATION"] * 6]


def test_a_listener_s_own_certificate_and_the_plain_users_of_its_jaas_config(sides):
    """``listener.name.oauth.ssl.keystore.location`` gives the OAUTH listener its own certificate; PLAIN
    on SASL_SSL accepts the users of ``listener.name.sasl_ssl.plain.sasl.jaas.config``, and only them (not
    a SCRAM user)."""
    def scenario(side: Side) -> list[Any]:
        def plain(user: str, password: str) -> str:
            settings = sasl_settings(side.sasl_servers, side.pki.ca, user, password, "PLAIN")
            return _raised(lambda: AdminClient(settings).list_topics(timeout=10)) or "accepted"
        return [certificate_issuer(side.sasl_servers), certificate_issuer(side.oauth_servers),
                plain("carol", PLAIN_USERS["carol"]),
                first_error(sasl_settings(side.sasl_servers, side.pki.ca, "carol", "wrong", "PLAIN")).name(),
                first_error(sasl_settings(side.sasl_servers, side.pki.ca, "alice", PASSWORDS["alice"],
                                          "PLAIN")).name()]
    assert same(sides, scenario) == ["strom test CA", "another CA", "accepted", "_AUTHENTICATION",
                                     "_AUTHENTICATION"]


def test_describe_configs_lists_the_listener_keys_alike_hiding_the_same_ones(sides):
    """A broker's DescribeConfigs lists its static ``listener.name.*`` keys as given (read-only, from the
    static broker config): a listener's keystore and truststore paths shown, its JAAS configs (PLAIN's
    users' passwords) hidden, and the mechanism keys whose type Kafka cannot tell hidden too."""
    shown = ("listener.name.oauth.ssl.keystore.location", "listener.name.oauth.ssl.truststore.location",
             "listener.name.sasl_ssl.sasl.enabled.mechanisms", "listener.name.oauth.sasl.enabled.mechanisms",
             "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class")
    hidden = ("listener.name.sasl_ssl.plain.sasl.jaas.config",
              "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config",
              "listener.name.oauth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url",
              "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience")
    unset = "listener.name.sasl_ssl.ssl.keystore.location"

    def scenario(side: Side) -> dict[str, tuple[Any, ...]]:
        broker, admin = ConfigResource(ConfigResource.Type.BROKER, "0"), side.admin()  # outlives the future
        entries = admin.describe_configs([broker])[broker].result()
        return {name: (entry.value, entry.is_sensitive, ConfigSource(entry.source).name, entry.is_read_only)
                for name, entry in entries.items() if name in (*shown, *hidden, unset)}
    described = same(sides, scenario)
    assert described[shown[0]][0] == str(sides[0].pki.other_broker)
    assert {name: entry[1:] for name, entry in described.items()} == {
        name: (name in hidden, "STATIC_BROKER_CONFIG", True) for name in (*shown, *hidden)}
    assert all(described[name][0] is None for name in hidden)


def _login(servers: str, ca: Path, token: str) -> str:
    """"accepted" once the client with ``token`` reads metadata, else the first error it reports."""
    errors: list[KafkaError] = []
    client = AdminClient({**oauth_settings(servers, ca, token), "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        client.poll(0.2)  # serves the token callback and the errors
        causes = [e.name() for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
        if causes:
            return causes[0]
        try:
            client.list_topics(timeout=0.5)
            return "accepted"
        except KafkaException:
            continue
    return "no answer"


def test_signed_oauthbearer_tokens_are_judged_as_kafkas_jwks_validator_does(sides, idp):
    """Kafka's OAuthBearerValidatorCallbackHandler (a JWKS, audience and issuer expected, clock skew
    30 s) and strom broker's sasl.oauthbearer.jwks.endpoint.url accept and refuse the same tokens."""
    now = int(time.time())
    tokens = {
        "valid": idp.token(),
        "valid, another subject and scopes": idp.token(idp.claims(sub="bob", scope=["a", "b"])),
        "not yet valid within the clock skew": idp.token(idp.claims(nbf=now + 10)),
        "no kid": idp.token(kid=None),
        "expired within the clock skew": idp.token(idp.claims(exp=now - 10)),
        "expired": idp.token(idp.claims(iat=now - 1200, exp=now - 600)),
        "not yet valid": idp.token(idp.claims(nbf=now + 600)),
        "another audience": idp.token(idp.claims(aud="another-cluster")),
        "no audience": idp.token(idp.claims(aud=None)),
        "another issuer": idp.token(idp.claims(iss="https://elsewhere.test")),
        "no issuer": idp.token(idp.claims(iss=None)),
        "no iat": idp.token(idp.claims(iat=None)),
        "no exp": idp.token(idp.claims(exp=None)),
        "no sub": idp.token(idp.claims(sub=None)),
        "a key the JWKS lacks": idp.token(stranger=True),
        "an unknown kid": idp.token(kid="unknown-kid"),
        "unsecured": unsecured_jws(idp.claims()),
    }

    def scenario(side: Side) -> tuple[dict[str, str], list[Any]]:
        with ThreadPoolExecutor(4) as pool:
            # the OAUTH listener's certificate is its own (listener.name.oauth.ssl.keystore.location)
            verdicts = pool.map(lambda token: _login(side.oauth_servers, side.pki.other_ca, token),
                                tokens.values())
            # the listener offers only OAUTHBEARER (listener.name.oauth.sasl.enabled.mechanisms)
            scram = first_error(sasl_settings(side.oauth_servers, side.pki.other_ca, "alice",
                                              PASSWORDS["alice"]))
            return dict(zip(tokens, verdicts, strict=True)), [scram.name(), "OAUTHBEARER" in scram.str()]
    verdicts, scram = same(sides, scenario)
    assert [name for name, verdict in verdicts.items() if verdict == "accepted"] == list(tokens)[:4]
    assert set(list(verdicts.values())[4:]) == {"_AUTHENTICATION"}
    assert scram == ["_AUTHENTICATION", True]


def test_a_principal_without_acls_is_refused_each_operation(sides):
    def scenario(side: Side) -> list[Any]:
        topic = side.topic("orders")
        bob = side.sasl("bob")
        bob_admin = AdminClient(bob)
        created = _raised(lambda: next(iter(bob_admin.create_topics([NewTopic(unique("new"), 1)]).values()))
                          .result())
        transactional = _raised(
            lambda: Producer({**bob, "transactional.id": unique("txn")}).init_transactions(20))
        listed = topic in bob_admin.list_topics(timeout=10).topics
        upsert = UserScramCredentialUpsertion("eve", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              b"eve-password")
        scram = _raised(lambda: bob_admin.alter_user_scram_credentials([upsert])["eve"].result())
        return [_name(produce_error(bob, topic)), _name(consume_error(bob, topic, unique("g"))), created,
                transactional, listed, scram,
                describe_acls_error(side.sasl_servers, side.pki, "bob", PASSWORDS["bob"])]
    assert same(sides, scenario) == [
        "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, "CLUSTER_AUTHORIZATION_FAILED",
        "ClusterAuthorizationFailedError"]


def test_acls_allow_what_they_name_and_deny_wins(sides):
    def scenario(side: Side) -> list[Any]:
        admin, alice = side.admin(), side.sasl("alice")
        topic, group, txn = side.topic("sales"), unique("team"), unique("txn")
        seen = []
        grant(admin, acl(ResourceType.TOPIC, "sales-", "User:alice", AclOperation.WRITE, pattern=PREFIXED))
        seen.append(_name(produce_error(alice, topic)))
        grant(admin, acl(ResourceType.GROUP, "team-", "User:alice", AclOperation.READ, pattern=PREFIXED))
        seen.append(_name(consume_error(alice, topic, group)))
        grant(admin, acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ))
        seen.append(_name(consume_error(alice, topic, group)))
        grant(admin, acl(ResourceType.TOPIC, topic, "User:alice", AclOperation.READ, DENY))
        seen.append(_name(consume_error(alice, topic, unique("team"))))
        grant(admin, acl(ResourceType.TRANSACTIONAL_ID, txn, "User:alice", AclOperation.WRITE))
        producer = Producer({**alice, "transactional.id": txn})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"in a transaction")
        seen.append(_raised(lambda: producer.commit_transaction(30)))
        described = admin.describe_acls(AclBindingFilter(
            ResourceType.TOPIC, topic, ResourcePatternType.MATCH, "User:alice", None, AclOperation.ANY,
            AclPermissionType.ANY)).result()
        seen.append(sorted((b.name == topic, b.resource_pattern_type.name, b.operation.name,
                            b.permission_type.name) for b in described))
        return seen
    assert same(sides, scenario)[:5] == [None, "TOPIC_AUTHORIZATION_FAILED", None,
                                         "TOPIC_AUTHORIZATION_FAILED", None]


def test_a_certificate_principal_and_the_scram_credential_apis(sides):
    def scenario(side: Side) -> list[Any]:
        admin = side.admin()
        topic = side.topic("certs")
        grant(admin, acl(ResourceType.TOPIC, topic, side.pki.client_principal, AclOperation.WRITE))
        written = _name(produce_error(side.mtls(side.pki.client_cert, side.pki.client_key), topic))
        user = unique("carol")
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              b"carol-password")
        admin.alter_user_scram_credentials([upsert])[user].result()
        admin.credentials_settled(user, [("SCRAM_SHA_512", 8192)])
        infos = described_credentials(admin, user)
        too_few = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10),
                                               b"x")
        refused = _raised(lambda: admin.alter_user_scram_credentials([too_few])[user].result())
        deleted = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
        admin.alter_user_scram_credentials([deleted])[user].result()
        admin.credentials_settled(user, "RESOURCE_NOT_FOUND")
        missing = described_credentials(admin, user)
        return [written, infos, refused, missing]
    assert same(sides, scenario) == [None, [("SCRAM_SHA_512", 8192)], "UNACCEPTABLE_CREDENTIAL",
                                     "RESOURCE_NOT_FOUND"]
