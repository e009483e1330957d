"""strom broker's TLS, mutual TLS and SASL (PLAIN, SCRAM-SHA-256/512) with real clients: librdkafka
(confluent-kafka), kcat and kafka-python; refused clients; the SCRAM credential APIs."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import ssl
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from security.conftest import PASSWORDS, mtls, sasl
from support.kafka import unique
from support.secured_clients import first_error

RECORDS = 20


def round_trip(conf: dict[str, str]) -> int:
    """Produces RECORDS records to a new topic and reads them back in a group; how many came back."""
    topic = unique("sec")
    producer = Producer(conf)
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), key=b"k")
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 20
    while got < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    consumer.close()
    return got


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN")])
def test_librdkafka_produces_and_consumes_over_sasl(secured, pki, listener, mechanism):
    assert round_trip(sasl(secured, pki, mechanism=mechanism, listener=listener)) == RECORDS


def test_librdkafka_produces_and_consumes_over_mutual_tls(secured, pki):
    assert round_trip(mtls(secured, pki)) == RECORDS


def test_a_client_closing_with_close_notify_leaves_the_broker_serving(secured, pki):
    """A TLS close_notify reads as 0 bytes: the connection ends and the broker goes on serving."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.check_hostname = False
    host, port = secured.listeners["SASL_SSL"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw, context.wrap_socket(raw) as tls, \
            contextlib.suppress(ssl.SSLError, OSError):  # the broker closes without answering it
        tls.unwrap()
    assert round_trip(sasl(secured, pki)) == RECORDS


def test_requests_and_responses_of_megabytes_cross_tls_intact(secured, pki):
    """Produce requests of about 1 MB arrive in hundreds of TLS records (librdkafka writes a few KB per
    record) and Fetch responses leave in chunks of the segment file: every byte comes back in order."""
    conf = sasl(secured, pki)
    topic = unique("large")
    values = [hashlib.sha256(str(i).encode()).digest() * 128 for i in range(2000)]  # 4 KB each, 8 MB
    producer = Producer({**conf, "linger.ms": 200})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": unique("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received, deadline = [], time.monotonic() + 30
    while len(received) < len(values) and time.monotonic() < deadline:
        received += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    assert received == values


def test_a_wrong_password_is_refused_and_says_so(secured, pki):
    error = first_error(sasl(secured, pki, password="not-the-password"))
    assert error.code() == KafkaError._AUTHENTICATION
    assert "Authentication failed" in error.str() and "SCRAM-SHA-512" in error.str()
    plain = first_error(sasl(secured, pki, mechanism="PLAIN", password="wrong", listener="SASL_PLAINTEXT"))
    assert plain.code() == KafkaError._AUTHENTICATION
    unknown = first_error(sasl(secured, pki, user="mallory", password="x"))
    assert unknown.code() == KafkaError._AUTHENTICATION
    assert "authentication failed on listener SASL_SSL from 127.0.0.1 with SCRAM-SHA-512" in (
        secured.log_path.read_text())


@pytest.mark.slow
def test_untrusted_or_missing_client_certificates_and_plaintext_are_refused(secured, pki):
    stranger = mtls(secured, pki, pki.stranger_cert, pki.stranger_key)
    no_certificate = {k: v for k, v in mtls(secured, pki).items()
                      if not k.startswith(("ssl.cert", "ssl.key"))}
    plaintext = {"bootstrap.servers": secured.listeners["SASL_SSL"]}
    distrusting = {**sasl(secured, pki), "ssl.ca.location": str(pki.other_ca)}
    no_sasl = {"bootstrap.servers": secured.listeners["SASL_PLAINTEXT"]}  # closed at its first request
    for conf in (stranger, no_certificate, plaintext, no_sasl):
        with pytest.raises(KafkaException):  # librdkafka says only "all brokers down": no metadata
            AdminClient(conf).list_topics(timeout=3)
    assert "certificate verify failed" in first_error(distrusting).str()
    assert round_trip(sasl(secured, pki)) == RECORDS  # authorised clients are still served
    deadline = time.monotonic() + 5
    while "TLS handshake with 127.0.0.1 on listener SSL failed" not in secured.log_path.read_text():
        assert time.monotonic() < deadline, "the refused certificates were not logged"
        time.sleep(0.1)


def kcat(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], input=stdin, capture_output=True, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_an_untrusted_client_certificate_is_told_by_a_tls_alert(secured, pki, version):
    """The broker sends the alert before it closes, as Kafka's does: the client learns its certificate was
    refused, not just that the connection closed. TLS 1.2 reads it in the handshake, TLS 1.3 right after
    (the client's handshake ends before the broker has checked its certificate)."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.stranger_cert), str(pki.stranger_key))
    context.maximum_version = version
    host, port = secured.listeners["SSL"].rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=10)
    with pytest.raises(ssl.SSLError) as refused, context.wrap_socket(raw, server_hostname="localhost") as tls:
        tls.recv(1)
    assert "ALERT_UNKNOWN_CA" in refused.value.reason


def test_kcat_over_sasl_ssl_and_mutual_tls(secured, pki):
    """kcat's bundled librdkafka 2.0.2 sends a wrong SCRAM nonce (fixed in librdkafka 2.1; Kafka refuses
    it too), so kcat logs in with PLAIN; SCRAM is librdkafka's and kafka-python's tests above."""
    topic = unique("kcat")
    plain = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice",
             "-X", f"sasl.password={PASSWORDS['alice']}", "-X", f"ssl.ca.location={pki.ca}"]
    produced = kcat("-b", secured.listeners["SASL_SSL"], *plain, "-P", "-t", topic, stdin=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}",
           "-X", f"ssl.certificate.location={pki.client_cert}", "-X", f"ssl.key.location={pki.client_key}"]
    consumed = kcat("-b", secured.listeners["SSL"], *tls, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == [b"one", b"two"]
    refused = kcat("-b", secured.listeners["SASL_SSL"], *plain[:-4], "-X", "sasl.password=wrong",
                   "-X", f"ssl.ca.location={pki.ca}", "-L", "-m", "5")
    assert refused.returncode != 0 and b"Authentication failed" in refused.stderr


@pytest.mark.slow
def test_kafka_python_over_sasl_ssl(secured, pki):
    from kafka import KafkaConsumer, KafkaProducer
    topic = unique("kp")
    settings = {"bootstrap_servers": secured.listeners["SASL_SSL"], "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice",
                "sasl_plain_password": PASSWORDS["alice"], "ssl_cafile": str(pki.ca)}
    producer = KafkaProducer(**settings)
    producer.send(topic, b"hello").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **settings)
    assert [m.value for m in consumer] == [b"hello"]
    consumer.close()


def test_scram_credentials_are_described_added_and_deleted_over_the_wire(secured, pki):
    admin = AdminClient(sasl(secured, pki, user="admin"))
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result()
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]
    user = unique("carol")
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          b"carol-password")
    admin.alter_user_scram_credentials([upsert])[user].result()
    assert round_trip(sasl(secured, pki, user=user, password="carol-password")) == RECORDS
    too_few = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"x")
    with pytest.raises(KafkaException) as refused:
        admin.alter_user_scram_credentials([too_few])[user].result()
    assert refused.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)])[
        user].result()
    deleted = first_error(sasl(secured, pki, user=user, password="carol-password"))
    assert deleted.code() == KafkaError._AUTHENTICATION
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials([user])[user].result()
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_no_password_reaches_the_broker_log(secured):
    """Last in this module: every login above (right and wrong passwords, SCRAM and PLAIN) is logged
    without its password."""
    log = secured.log_path.read_text()
    assert "authentication failed" in log
    for secret in (*PASSWORDS.values(), "not-the-password", "carol-password"):
        assert secret not in log
