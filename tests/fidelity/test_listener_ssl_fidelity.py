"""A listener's TLS files set at run time where Apache Kafka refuses them for what the listener had at start
(its ``SslFactory``): a truststore added to a listener that has none, and a key password for a private key
that is not encrypted. One Kafka node and one strom broker, each with an SSL listener with a keystore and
no truststore, are asked the same IncrementalAlterConfigs and must answer alike."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from strom.broker import EmbeddedBroker
from support.apache_kafka import KafkaCluster
from support.certificates import Pki, make_pki
from support.processes import free_port

pytestmark = [pytest.mark.broker, pytest.mark.slow]

SSL_LISTENER = {"listener.name.ssl.ssl.keystore.type": "PEM", "listener.name.ssl.ssl.truststore.type": "PEM"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[str]:
    """The PLAINTEXT listener of a Kafka node that also has an SSL listener without a truststore."""
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka"), brokers=1)
    plaintext, controller, ssl_port = cluster.ports[0], cluster.controller_ports[0], free_port()
    cluster.config.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{plaintext},CONTROLLER://127.0.0.1:{controller},"
                     f"SSL://127.0.0.1:{ssl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{plaintext},SSL://127.0.0.1:{ssl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL",
        "listener.name.ssl.ssl.keystore.location": str(pki.broker), **SSL_LISTENER})
    with cluster:
        yield cluster.bootstrap_servers


@pytest.fixture(scope="module")
def strom(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[str]:
    broker = EmbeddedBroker(tmp_path_factory.mktemp("strom"), config={
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "listener.name.ssl.ssl.keystore.location": str(pki.broker), **SSL_LISTENER}).start()
    try:
        yield broker.listeners["PLAINTEXT"]
    finally:
        broker.stop()


def _alter(servers: str, **configs: str) -> str:
    """SET node 0's ``listener.name.ssl.ssl.<key>`` configs: the error's name, NO_ERROR if accepted."""
    entries = [ConfigEntry(f"listener.name.ssl.ssl.{key.replace('_', '.')}", value,
                           incremental_operation=AlterConfigOpType.SET) for key, value in configs.items()]
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": servers})  # kept until the answer: a client gone ends it
    try:
        admin.incremental_alter_configs([resource])[resource].result(30)
        return "NO_ERROR"
    except KafkaException as exc:
        return exc.args[0].name()


def test_a_truststore_added_and_a_password_for_a_plain_key_are_refused_as_kafka_refuses_them(
        kafka: str, strom: str, pki: Pki) -> None:
    def scenario(servers: str) -> tuple[str, ...]:
        return (_alter(servers, truststore_location=str(pki.ca)),
                _alter(servers, keystore_location=str(pki.broker), key_password="not-it-42"),
                _alter(servers, key_password="not-it-42"),
                _alter(servers, keystore_location=str(pki.broker)))  # the same key without one: accepted
    expected = ("INVALID_REQUEST", "INVALID_REQUEST", "INVALID_REQUEST", "NO_ERROR")
    assert scenario(kafka) == expected
    assert scenario(strom) == expected
