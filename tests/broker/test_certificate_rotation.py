"""A listener's certificate rotated on a running broker, as Kafka's dynamic listener SSL configs do it:
IncrementalAlterConfigs on this broker's resource sets ``listener.name.<listener>.ssl.*``; new connections
get the new keystore and truststore, open ones keep theirs; a file that does not load or a certificate
for another name is refused and nothing changes; the change survives a restart."""

from __future__ import annotations

import socket
import ssl
import stat
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from cryptography import x509
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from strom.broker import EmbeddedBroker
from strom.broker.config import BrokerConfig, NotDynamicError
from strom.broker.security.tls import KeystoreRefused, ListenerTls
from strom.errors import StromError
from strom.kafka import clients
from strom.kafka.wire import WireClient
from support.certificates import KEY_PASSWORD, Pki, make_pki, renewed_pki
from support.secured_clients import mtls_settings

KEYSTORE, TRUSTSTORE = "listener.name.ssl.ssl.keystore.location", "listener.name.ssl.ssl.truststore.location"
PASSWORD = "listener.name.ssl.ssl.key.password"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def _start(data_dir: Path, pki: Pki) -> EmbeddedBroker:
    """A broker with a PLAINTEXT listener (the operator's) and a mutual-TLS one."""
    return EmbeddedBroker(data_dir, config={
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker),
        "ssl.truststore.location": str(pki.ca), "ssl.client.auth": "required"}).start()


def _alter(broker: EmbeddedBroker, *entries: tuple[str, str | None]) -> str:
    """SET (DELETE for None) this broker's dynamic configs: "ok", or the error's code and message."""
    configs = [ConfigEntry(key, value, incremental_operation=AlterConfigOpType.DELETE if value is None
                           else AlterConfigOpType.SET) for key, value in entries]
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=configs)
    admin = clients.admin(broker.listeners["PLAINTEXT"])
    try:
        admin.incremental_alter_configs([resource])[resource].result(10)
        return "ok"
    except KafkaException as exc:
        return f"{exc.args[0].name()}: {exc.args[0].str()}"


def _described(broker: EmbeddedBroker) -> dict[str, tuple[str | None, int, bool]]:
    resource = ConfigResource(ResourceType.BROKER, "0")
    admin = clients.admin(broker.listeners["PLAINTEXT"])
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: (e.value, e.source, e.is_sensitive) for k, e in entries.items()
            if k.startswith("listener.name.")}


def _serial(servers: str, ca: Path, cert: Path, key: Path) -> int:
    """The serial number of the certificate the TLS listener at ``servers`` presents to a new client."""
    host, _, port = servers.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    with socket.create_connection((host, int(port)), timeout=10) as sock, \
            context.wrap_socket(sock, server_hostname=host) as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def _connects(settings: dict[str, str]) -> bool:
    """Whether a new client with these settings gets an answer (a metadata request) from the listener."""
    try:
        with WireClient(settings["bootstrap.servers"], timeout=5, settings=settings) as client:
            client.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        return True
    except (StromError, OSError, EOFError):
        return False


@pytest.mark.slow
def test_a_rotated_certificate_serves_new_clients_old_connections_keep_theirs_and_a_restart_keeps_it(
        tmp_path: Path, pki: Pki) -> None:
    renewed = renewed_pki(tmp_path / "renewed")
    broker = _start(tmp_path / "data", pki)
    try:
        old = mtls_settings(broker.listeners["SSL"], pki.ca, pki.client_cert, pki.client_key)
        new = mtls_settings(broker.listeners["SSL"], renewed.ca, renewed.client_cert, renewed.client_key)
        producer = clients.producer(old["bootstrap.servers"], **{k: v for k, v in old.items()
                                                                 if k != "bootstrap.servers"})
        producer.produce("rotated", b"before")
        assert producer.flush(15) == 0
        assert not _connects(new)  # the new CA's client does not trust the broker's certificate yet

        assert _alter(broker, (KEYSTORE, str(renewed.broker)), (TRUSTSTORE, str(renewed.ca))) == "ok"

        assert _serial(new["bootstrap.servers"], renewed.ca, renewed.client_cert,
                       renewed.client_key) == renewed.broker_serial
        fresh = clients.producer(new["bootstrap.servers"], **{k: v for k, v in new.items()
                                                              if k != "bootstrap.servers"})
        fresh.produce("rotated", b"new client")
        assert fresh.flush(15) == 0
        producer.produce("rotated", b"old connection")  # its connection was opened before: it still works
        assert producer.flush(15) == 0
        assert not _connects(old)  # a new connection with the old CA is refused now
        assert _described(broker) == {KEYSTORE: (str(renewed.broker), 2, False),
                                      TRUSTSTORE: (str(renewed.ca), 2, False)}

        broker.restart()
        new["bootstrap.servers"] = old["bootstrap.servers"] = broker.listeners["SSL"]
        assert _connects(new) and not _connects(old)
        again = renewed_pki(tmp_path / "again")  # renewed in place: the same path set again is read again
        renewed.broker.write_bytes(again.broker.read_bytes())
        assert _alter(broker, (KEYSTORE, str(renewed.broker))) == "ok"
        assert _serial(broker.listeners["SSL"], again.ca, renewed.client_cert,
                       renewed.client_key) == again.broker_serial
        saved = broker.data_dir / "dynamic-configs.json"
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        broker.stop()
        renewed.broker.unlink()  # gone before a restart: the start stops, naming the key
        with pytest.raises(StromError):
            broker.start()
        assert f"Cannot read {KEYSTORE}={renewed.broker}: no such file." in broker.log_path.read_text()
    finally:
        broker.stop()


@pytest.mark.slow
def test_a_keystore_that_does_not_load_or_names_another_subject_is_refused_and_nothing_changes(
        tmp_path: Path, pki: Pki) -> None:
    broker = _start(tmp_path / "data", pki)
    try:
        refused = {
            "missing": _alter(broker, (KEYSTORE, str(tmp_path / "nowhere.pem"))),
            "not a keystore": _alter(broker, (KEYSTORE, str(pki.ca))),
            "wrong password": _alter(broker, (KEYSTORE, str(pki.broker_encrypted)), (PASSWORD, "not-it-42")),
            "another subject": _alter(broker, (KEYSTORE, str(pki.other_broker))),
            "no listener prefix": _alter(broker, ("ssl.keystore.location", str(pki.broker))),
            "no such listener": _alter(broker, ("listener.name.tls.ssl.keystore.location", str(pki.broker))),
        }
        assert all(said.startswith("INVALID_REQUEST: ") for said in refused.values()), refused
        assert all(KEYSTORE in refused[case] for case in ("missing", "not a keystore", "wrong password"))
        assert "O=elsewhere" in refused["another subject"]
        assert "ssl.allow.dn.changes" in refused["another subject"]
        assert "per-listener" in refused["no listener prefix"]
        assert "not a TLS listener" in refused["no such listener"]
        assert _described(broker) == {}  # nothing changed
        old = mtls_settings(broker.listeners["SSL"], pki.ca, pki.client_cert, pki.client_key)
        assert _connects(old)

        # the encrypted copy of the same key with its password: accepted, the password never shown
        assert _alter(broker, (KEYSTORE, str(pki.broker_encrypted)), (PASSWORD, KEY_PASSWORD)) == "ok"
        assert _described(broker)[PASSWORD] == (None, 2, True)
        assert _connects(old)
    finally:
        broker.stop()
    assert "not-it-42" not in broker.log_path.read_text() and KEY_PASSWORD not in broker.log_path.read_text()


def test_listener_tls_files_change_only_per_listener_on_this_broker_and_win_over_the_static_ones():
    config = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/keys/a.pem",
                           "listener.name.ssl.ssl.keystore.location": "/keys/b.pem"})
    config.set_dynamic("broker", {"listener.name.SSL.ssl.keystore.location": "/keys/c.pem"})
    assert config.listener("SSL")["ssl.keystore.location"] == "/keys/c.pem"
    assert config.dynamic["broker"] == {KEYSTORE: "/keys/c.pem"}
    for layer, key, said in [("broker", "ssl.truststore.location", "only per-listener"),
                             ("cluster-default", KEYSTORE, "broker id must be specified"),
                             ("broker", "listener.name.ssl.ssl.client.auth", "Cannot update these configs")]:
        with pytest.raises(NotDynamicError, match=said):
            config.set_dynamic(layer, {key: "x"})
    assert config.dynamic["broker"] == {KEYSTORE: "/keys/c.pem"}


def test_a_certificate_without_a_name_of_the_one_in_use_is_refused_unless_allowed(tmp_path: Path, pki: Pki):
    nameless = renewed_pki(tmp_path / "nameless", alternative_names=False)
    for allowed, refused in (("false", True), ("true", False)):
        config = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker),
                               "listener.name.ssl.ssl.allow.san.changes": allowed})
        tls = ListenerTls(config)
        config.set_dynamic("broker", {KEYSTORE: str(nameless.broker)})
        if refused:
            with pytest.raises(KeystoreRefused, match=r"alternative names 127\.0\.0\.1, localhost"):
                tls.reload(tls.listeners([KEYSTORE]))
        else:
            tls.reload(tls.listeners([KEYSTORE]))()
