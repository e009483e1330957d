"""strom broker's SCRAM server against the exchanges of RFC 7677 (SHA-256) and RFC 5802 (SHA-1's
example, recomputed here for SHA-512 with the standard library), and the credentials it stores."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from strom.broker.security.scram import Credential, Mechanism, ScramError, ScramServer
from strom.kafka.security import AuthenticationError
from strom.kafka.wire_login import sasl_login

# RFC 7677, section 3: user "user", password "pencil"
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server(password: str = "pencil") -> ScramServer:
    credential = Credential.from_password(Mechanism.SCRAM_SHA_256, password, 4096, SALT)
    return ScramServer(Mechanism.SCRAM_SHA_256, {"user": credential}.get, lambda: SERVER_NONCE)


def test_the_rfc_7677_exchange():
    server = rfc_server()
    assert server.first(CLIENT_FIRST) == SERVER_FIRST
    assert server.final(CLIENT_FINAL) == SERVER_FINAL
    assert server.username == "user"


def test_a_wrong_password_an_unknown_user_and_a_replayed_nonce_fail():
    server = rfc_server(password="not pencil")
    server.first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="invalid credentials"):
        server.final(CLIENT_FINAL)
    with pytest.raises(ScramError, match="unknown user"):
        rfc_server().first(b"n,,n=nobody,r=abc")
    credential = Credential.from_password(Mechanism.SCRAM_SHA_256, "pencil", 4096, SALT)
    other = ScramServer(Mechanism.SCRAM_SHA_256, {"user": credential}.get, lambda: "another")
    other.first(CLIENT_FIRST)
    with pytest.raises(ScramError, match="nonce"):
        other.final(CLIENT_FINAL)


def scram_exchange(server: ScramServer) -> Callable[[str, bytes], bytes]:
    """strom's client talking to strom broker's SCRAM server, token by token."""
    steps = iter((server.first, server.final))
    return lambda _mechanism, token: next(steps)(token)


@pytest.mark.parametrize("mechanism", [Mechanism.SCRAM_SHA_256, Mechanism.SCRAM_SHA_512])
def test_stroms_client_logs_in_and_checks_the_servers_proof(mechanism):
    credential = Credential.from_password(mechanism, "s3cret", 4096)
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism.mechanism_name,
                "sasl.username": "al,i=ce", "sasl.password": "s3cret"}
    server = ScramServer(mechanism, {"al,i=ce": credential}.get)
    sasl_login(settings, scram_exchange(server))
    assert server.username == "al,i=ce"
    with pytest.raises(ScramError):
        sasl_login({**settings, "sasl.password": "wrong"}, scram_exchange(ScramServer(mechanism, {
            "al,i=ce": credential}.get)))
    # a server that does not know the credential cannot sign the exchange: the client refuses it
    forged = iter((ScramServer(mechanism, {"al,i=ce": credential}.get).first,
                   lambda _token: b"v=" + base64.b64encode(bytes(64))))
    with pytest.raises(AuthenticationError):
        sasl_login(settings, lambda _mechanism, token: next(forged)(token))


def test_a_credential_checks_a_plain_password_and_never_shows_its_keys():
    credential = Credential.from_password(Mechanism.SCRAM_SHA_512, "s3cret", 4096)
    assert credential.matches_password("s3cret") and not credential.matches_password("S3cret")
    assert repr(credential) == "Credential(SCRAM-SHA-512, iterations=4096)"
