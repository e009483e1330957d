"""How ``WireClient`` reaches a secured listener as librdkafka's settings say: TLS from
``security.protocol`` SSL/SASL_SSL (``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``, ``ssl.key.password``; the broker's name checked unless
``ssl.endpoint.identification.algorithm=none``), then SASL PLAIN or SCRAM-SHA-256/512 (RFC 5802) with
``sasl.username``/``sasl.password``: stdlib ``ssl``, ``hashlib`` and ``hmac`` only."""

from __future__ import annotations

import base64
import hmac
import secrets
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from strom import scram
from strom.errors import ConfigError
from strom.kafka.security import AuthenticationError, sasl_mechanism

__all__ = ["sasl_login", "secure"]

_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def _protocol(settings: Mapping[str, Any]) -> str:
    return str(settings.get("security.protocol", "plaintext")).upper()


def secure(sock: socket.socket, host: str, settings: Mapping[str, Any]) -> socket.socket:
    """``sock`` wrapped in TLS when the protocol says so (the handshake done), else ``sock``."""
    if _protocol(settings) not in ("SSL", "SASL_SSL"):
        return sock
    context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
    if str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    if settings.get("ssl.certificate.location"):
        context.load_cert_chain(settings["ssl.certificate.location"], settings.get("ssl.key.location"),
                                settings.get("ssl.key.password"))
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLError as exc:
        sock.close()
        raise AuthenticationError(f"TLS with {host} failed ({exc.reason or exc}): check ssl.ca.location "
                                  "(the CA that signed the broker's certificate) and the client "
                                  "certificate.") from None


def sasl_login(settings: Mapping[str, Any], exchange: Callable[[str, bytes], bytes]) -> None:
    """Logs in over SASL when the protocol says so. ``exchange(mechanism, token)`` sends one token
    (SaslHandshake first, with the mechanism) and returns the broker's answer."""
    if not _protocol(settings).startswith("SASL"):
        return
    mechanism = sasl_mechanism(settings)
    user, password = str(settings.get("sasl.username", "")), str(settings.get("sasl.password", ""))
    if mechanism == "PLAIN":
        exchange(mechanism, f"\0{user}\0{password}".encode())
    elif mechanism in _SCRAM_HASHES:
        _scram(_SCRAM_HASHES[mechanism], user, password, lambda token: exchange(mechanism, token))
    else:
        raise ConfigError(f"sasl.mechanism={mechanism} is not supported here (PLAIN, SCRAM-SHA-256, "
                          "SCRAM-SHA-512 are).")


def _scram(name: str, user: str, password: str, send: Callable[[bytes], bytes]) -> None:
    """RFC 5802's client: proves the password without sending it, and checks the broker knows it too."""
    nonce = secrets.token_urlsafe(24)
    first_bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={nonce}"
    server_first = send(f"n,,{first_bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    if not fields.get("r", "").startswith(nonce):
        raise AuthenticationError("The broker answered SCRAM with another nonce; refusing to go on.")
    derived = scram.keys(name, scram.salted_password(name, password, base64.b64decode(fields["s"]),
                                                     int(fields["i"])))
    without_proof = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    proof = scram.xor(derived.client_key, scram.signature(name, derived.stored_key, auth_message))
    server_final = send(f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
    expected = scram.signature(name, derived.server_key, auth_message)
    if not hmac.compare_digest(server_final.removeprefix("v=").encode(), base64.b64encode(expected)):
        raise AuthenticationError(f"The broker did not prove it knows User:{user}'s SCRAM credential; "
                                  "refusing it.")
