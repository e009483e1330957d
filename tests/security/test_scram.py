"""strom broker's SCRAM server against the exchanges of RFC 7677 (SHA-256) and RFC 5802 (SHA-1's
example, recomputed here for SHA-512 with the standard library), and the credentials it stores."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from strom.broker.security.scram import Credential, Mechanism, ScramError, ScramServer

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


def test_a_sha_512_client_computed_with_the_standard_library_logs_in():
    credential = Credential.from_password(Mechanism.SCRAM_SHA_512, "s3cret", 4096)
    server = ScramServer(Mechanism.SCRAM_SHA_512, {"alice": credential}.get)
    client_first_bare = "n=alice,r=clientnonce"
    server_first = server.first(b"n,," + client_first_bare.encode()).decode()
    attributes = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha512", b"s3cret", base64.b64decode(attributes["s"]), int(attributes["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    without_proof = f"c=biws,r={attributes['r']}"
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth_message, "sha512").digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    answer = server.final(f"{without_proof},p={proof}".encode())
    server_key = hmac.new(salted, b"Server Key", "sha512").digest()
    assert answer == b"v=" + base64.b64encode(hmac.new(server_key, auth_message, "sha512").digest())


def test_a_credential_checks_a_plain_password_and_never_shows_its_keys():
    credential = Credential.from_password(Mechanism.SCRAM_SHA_512, "s3cret", 4096)
    assert credential.matches_password("s3cret") and not credential.matches_password("S3cret")
    assert repr(credential) == "Credential(SCRAM-SHA-512, iterations=4096)"
