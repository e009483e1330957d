"""A listener's certificate rotated on a running broker, as Kafka's dynamic listener SSL configs do it:
IncrementalAlterConfigs on this broker's resource sets ``listener.name.<listener>.ssl.*``; new connections
get the new keystore and truststore, open ones keep theirs; a file that does not load or a certificate
for another name is refused and nothing changes; the change survives a restart, which needs only the
rotated files."""

from __future__ import annotations

import shutil
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
from strom.broker.broker import Broker, bind_listeners
from strom.broker.config import BrokerConfig, NotDynamicError
from strom.broker.security.tls import KeystoreRefused, ListenerTls
from strom.errors import BrokerStartError, StromError
from strom.kafka import clients
from strom.kafka.wire import WireClient
from support.certificates import KEY_PASSWORD, Pki, make_pki, renewed_pki
from support.secured_clients import mtls_settings

KEYSTORE, TRUSTSTORE = "listener.name.ssl.ssl.keystore.location", "listener.name.ssl.ssl.truststore.location"
PASSWORD = "listener.name.ssl.ssl.key.password"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def _start(data_dir: Path, pki: Pki, keystore: Path | None = None, truststore: Path | None = None
           ) -> EmbeddedBroker:
    """A broker with a PLAINTEXT listener (the operator's) and a mutual-TLS one (with pki's keystore and
    truststore unless ``keystore`` and ``truststore`` name copies of them)."""
    return EmbeddedBroker(data_dir, config={
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(keystore or pki.broker),
        "ssl.truststore.location": str(truststore or pki.ca), "ssl.client.auth": "required"}).start()


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


def _files(directory: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``directory``, with its modification time and content."""
    return {str(path.relative_to(directory)): (path.stat().st_mtime_ns, path.read_bytes())
            for path in sorted(directory.rglob("*")) if path.is_file()}


def _tls(config: BrokerConfig) -> ListenerTls:
    """The TLS contexts of ``config``'s listeners, as the broker starts them (the ports closed again)."""
    listeners = bind_listeners(config, "127.0.0.1", 0, None, Path("dynamic-configs.json"))
    for listener in listeners:
        listener.sock.close()
    return ListenerTls(config, listeners)


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
def test_a_restart_after_a_rotation_needs_only_the_rotated_files(tmp_path: Path, pki: Pki) -> None:
    """As Kafka applies its dynamic broker configs before it serves: the listener starts with the rotated
    keystore and truststore, so the files the broker was first started with may be gone."""
    static_keystore, static_truststore = tmp_path / "static-broker.pem", tmp_path / "static-ca.pem"
    shutil.copy(pki.broker, static_keystore)
    shutil.copy(pki.ca, static_truststore)
    renewed = renewed_pki(tmp_path / "renewed")
    broker = _start(tmp_path / "data", pki, static_keystore, static_truststore)
    try:
        assert _alter(broker, (KEYSTORE, str(renewed.broker)), (TRUSTSTORE, str(renewed.ca))) == "ok"
        broker.stop()
        static_keystore.unlink()
        static_truststore.unlink()
        broker.start()
        new = mtls_settings(broker.listeners["SSL"], renewed.ca, renewed.client_cert, renewed.client_key)
        old = mtls_settings(broker.listeners["SSL"], pki.ca, pki.client_cert, pki.client_key)
        assert _serial(new["bootstrap.servers"], renewed.ca, renewed.client_cert,
                       renewed.client_key) == renewed.broker_serial
        assert _connects(new) and not _connects(old)
        assert _described(broker) == {KEYSTORE: (str(renewed.broker), 2, False),
                                      TRUSTSTORE: (str(renewed.ca), 2, False)}
        # rotated again after that start: compared with the rotated certificate, which is in use
        again = renewed_pki(tmp_path / "again")
        renewed.broker.write_bytes(again.broker.read_bytes())
        assert _alter(broker, (KEYSTORE, str(renewed.broker)), (TRUSTSTORE, str(again.ca))) == "ok"
        assert _serial(broker.listeners["SSL"], again.ca, again.client_cert,
                       again.client_key) == again.broker_serial
    finally:
        broker.stop()


@pytest.mark.slow
def test_a_rotated_file_gone_at_start_is_named_and_the_data_directory_is_left_as_it_was(
        tmp_path: Path, pki: Pki) -> None:
    renewed = renewed_pki(tmp_path / "renewed")
    broker = _start(tmp_path / "data", pki)
    try:
        assert _alter(broker, (KEYSTORE, str(renewed.broker))) == "ok"
    finally:
        broker.stop()
    renewed.broker.unlink()
    before = _files(broker.data_dir)
    with pytest.raises(BrokerStartError) as refused:
        Broker(broker.data_dir, port=0, config=broker.config)
    saved = broker.data_dir.resolve() / "dynamic-configs.json"
    said = str(refused.value)
    assert said.startswith(f"Cannot read {KEYSTORE}={renewed.broker}: no such file. "), said
    assert f"set at run time and is kept in {saved}: " in said and "or remove the key there" in said, said
    assert _files(broker.data_dir) == before


@pytest.mark.slow
def test_a_keystore_that_does_not_load_or_names_another_subject_is_refused_and_nothing_changes(
        tmp_path: Path, pki: Pki) -> None:
    broker = _start(tmp_path / "data", pki)
    try:
        refused = {
            "missing": _alter(broker, (KEYSTORE, str(tmp_path / "nowhere.pem"))),
            "not a keystore": _alter(broker, (KEYSTORE, str(pki.ca))),
            "wrong password": _alter(broker, (KEYSTORE, str(pki.broker_encrypted)), (PASSWORD, "not-it-42")),
            "plain key with a password": _alter(broker, (KEYSTORE, str(pki.broker)), (PASSWORD, "not-it-42")),
            "a password for the plain key": _alter(broker, (PASSWORD, "not-it-42")),
            "another subject": _alter(broker, (KEYSTORE, str(pki.other_broker))),
            "no listener prefix": _alter(broker, ("ssl.keystore.location", str(pki.broker))),
            "no such listener": _alter(broker, ("listener.name.tls.ssl.keystore.location", str(pki.broker))),
        }
        assert all(said.startswith("INVALID_REQUEST: ") for said in refused.values()), refused
        assert all(KEYSTORE in refused[case] for case in ("missing", "not a keystore", "wrong password"))
        for case, keystore in (("plain key with a password", KEYSTORE),
                               ("a password for the plain key", "ssl.keystore.location")):
            assert (f"{PASSWORD} is set, but the private key in {keystore}={pki.broker} is not encrypted"
                    in refused[case]), refused[case]
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
        tls = _tls(config)
        config.set_dynamic("broker", {KEYSTORE: str(nameless.broker)})
        if refused:
            with pytest.raises(KeystoreRefused, match=r"alternative names 127\.0\.0\.1, localhost"):
                tls.reload(tls.listeners([KEYSTORE]))
        else:
            tls.reload(tls.listeners([KEYSTORE]))()


def test_a_key_password_for_a_key_that_is_not_encrypted_is_refused_at_start_naming_the_key(pki: Pki):
    """As Kafka's PEM keystore refuses it (it decrypts the key with any password given)."""
    for given, named in (("ssl.key.password", "ssl.key.password"), (PASSWORD, PASSWORD)):
        config = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker),
                               given: "not-it-42"})
        with pytest.raises(BrokerStartError) as refused:
            bind_listeners(config, "127.0.0.1", 0, None, Path("dynamic-configs.json"))
        assert str(refused.value).startswith(f"{named} is set, but the private key in ssl.keystore.location="
                                             f"{pki.broker} is not encrypted")
        assert "not-it-42" not in str(refused.value)


def test_a_truststore_is_not_added_at_run_time_to_a_listener_without_one(tmp_path: Path, pki: Pki):
    """As Kafka refuses it ("Cannot add SSL truststore to an existing listener for which no truststore was
    configured"); a listener that has one may take another."""
    config = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker)})
    tls = _tls(config)
    config.set_dynamic("broker", {TRUSTSTORE: str(pki.ca)})
    with pytest.raises(KeystoreRefused, match=rf"Cannot add {TRUSTSTORE}=.* to listener SSL, which has no "
                                              "truststore"):
        tls.reload(tls.listeners([TRUSTSTORE]))
    renewed = renewed_pki(tmp_path / "renewed")
    config = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker),
                           "ssl.truststore.location": str(pki.ca)})
    tls = _tls(config)
    config.set_dynamic("broker", {TRUSTSTORE: str(renewed.ca)})
    tls.reload(tls.listeners([TRUSTSTORE]))()
