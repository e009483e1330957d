"""Fixtures of the security tests: a throwaway PKI, and a strom broker with a SASL_SSL, a mutual-TLS
and a SASL_PLAINTEXT listener (users alice and admin; the authorizer off in `secured`, on in `guarded`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.broker import EmbeddedBroker
from strom.broker.security.credentials import add_scram_user
from strom.broker.security.listeners import DEFAULT_PROTOCOL_MAP
from strom.broker.security.scram import Mechanism
from support.certificates import Pki, make_pki
from support.secured_clients import mtls_settings, sasl_settings

PASSWORDS = {"alice": "alice-pw-7Qx", "admin": "admin-pw-3Zk", "bob": "bob-pw-9Lm"}
LISTENERS = "SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def secured_config(pki: Pki, **extra: str) -> dict[str, str]:
    return {"listeners": LISTENERS, "ssl.keystore.location": str(pki.broker),
            "ssl.truststore.location": str(pki.ca), "ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER", **extra}


def oauth_listener(keys: dict[str, str]) -> dict[str, str]:
    """secured_config's extras for a fourth listener, OAUTH (SASL_SSL), configured by ``keys``: Kafka's
    per-listener keys (``KafkaSecurity.oauth_listener()``, which Apache Kafka's node takes too)."""
    return {"listeners": f"{LISTENERS},OAUTH://127.0.0.1:0",
            "listener.security.protocol.map": f"{DEFAULT_PROTOCOL_MAP},OAUTH:SASL_SSL", **keys}


def start_secured(data_dir: Path, pki: Pki, **extra: str) -> EmbeddedBroker:
    """A broker with the three listeners and the users of PASSWORDS (added as an operator does,
    to the data directory before the start)."""
    for user, password in PASSWORDS.items():
        add_scram_user(data_dir, user, password, list(Mechanism), 4096)
    return EmbeddedBroker(data_dir, config=secured_config(pki, **extra)).start()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    broker = start_secured(tmp_path_factory.mktemp("secured"), pki)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    """The secured broker with the authorizer on (User:admin its super user; nobody else holds an ACL)."""
    broker = start_secured(tmp_path_factory.mktemp("guarded"), pki, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    yield broker
    broker.stop()


def sasl(broker: EmbeddedBroker, pki: Pki, user: str = "alice", mechanism: str = "SCRAM-SHA-512",
         password: str | None = None, listener: str = "SASL_SSL") -> dict[str, str]:
    """librdkafka settings of `user` on a SASL listener."""
    return sasl_settings(broker.listeners[listener], pki.ca if listener == "SASL_SSL" else None, user,
                         PASSWORDS.get(user, "") if password is None else password, mechanism)


def mtls(broker: EmbeddedBroker, pki: Pki, cert: Path | None = None,
         key: Path | None = None) -> dict[str, str]:
    """librdkafka settings of the client certificate (by default the trusted one) on the SSL listener."""
    return mtls_settings(broker.listeners["SSL"], pki.ca, cert or pki.client_cert, key or pki.client_key)
