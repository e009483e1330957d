"""How ``WireClient`` reaches a secured listener as librdkafka's settings say: TLS from
``security.protocol`` SSL/SASL_SSL (``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``, ``ssl.key.password``; the broker's name checked unless
``ssl.endpoint.identification.algorithm=none``), then SASL PLAIN or SCRAM-SHA-256/512 (RFC 5802) with
``sasl.username``/``sasl.password``, or OAUTHBEARER (RFC 7628) with a token from the application's
``oauth_cb`` (confluent-kafka's token callback), from the identity provider's token endpoint
(``sasl.oauthbearer.method=oidc``: the client-credentials grant of ``sasl.oauthbearer.client.id``/
``client.secret``, ``scope``, ``token.endpoint.url``, trusting ``https.ca.location``; extensions of
``sasl.oauthbearer.extensions``) or librdkafka's unsecured development token
(``enable.sasl.oauthbearer.unsecure.jwt`` with ``sasl.oauthbearer.config`` ``principal=... [scope=...]
[lifeSeconds=...] [extension_<key>=<value>]``): stdlib only."""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import socket
import ssl
import time
import urllib.parse
import urllib.request
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
    elif mechanism == "OAUTHBEARER":
        token, extensions = oauthbearer_token(settings)
        pairs = "".join(f"{key}={value}\x01" for key, value in extensions.items())
        answer = exchange(mechanism, f"n,,\x01auth=Bearer {token}\x01{pairs}\x01".encode())
        if answer:  # RFC 7628's error challenge: acknowledged, and the broker then says it failed
            exchange(mechanism, b"\x01")
    else:
        raise ConfigError(f"sasl.mechanism={mechanism} is not supported here (PLAIN, SCRAM-SHA-256, "
                          "SCRAM-SHA-512, OAUTHBEARER are).")


def oauthbearer_token(settings: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The token librdkafka would present with these settings, and its SASL extensions: from the
    application's ``oauth_cb`` (confluent-kafka's token callback, given ``sasl.oauthbearer.config``), the
    identity provider's token endpoint (``sasl.oauthbearer.method=oidc``, extensions from
    ``sasl.oauthbearer.extensions``) or librdkafka's unsecured development token (extensions from
    ``extension_<key>=<value>`` in ``sasl.oauthbearer.config``)."""
    if callable(settings.get("oauth_cb")):
        return _token_from_callback(settings)
    if str(settings.get("sasl.oauthbearer.method", "default")).lower() == "oidc":
        extensions = str(settings.get("sasl.oauthbearer.extensions", ""))
        return _token_from_endpoint(settings), dict(
            pair.strip().split("=", 1) for pair in extensions.split(",") if "=" in pair)
    if str(settings.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).lower() not in ("true", "1"):
        raise ConfigError("sasl.mechanism=OAUTHBEARER needs oauth_cb (a token callback), "
                          "sasl.oauthbearer.method=oidc (and its token endpoint and client credentials), or "
                          "enable.sasl.oauthbearer.unsecure.jwt=true with "
                          "sasl.oauthbearer.config=principal=... for an unsecured development token.")
    options = dict(part.split("=", 1) for part in str(settings.get("sasl.oauthbearer.config", "")).split()
                   if "=" in part)
    if not options.get("principal"):
        raise ConfigError("sasl.oauthbearer.config needs principal=<name> for an unsecured token.")
    now = int(time.time())
    claims = {"sub": options["principal"], "iat": now, "exp": now + int(options.get("lifeSeconds", 3600))}
    if options.get("scope"):
        claims["scope"] = options["scope"].split(",")
    extensions = {key[len("extension_"):]: value for key, value in options.items()
                  if key.startswith("extension_")}
    return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}.", extensions


def _token_from_callback(settings: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """confluent-kafka's ``oauth_cb(sasl.oauthbearer.config)``: (token, expiry) or (token, expiry,
    principal, extensions)."""
    try:
        answer = settings["oauth_cb"](settings.get("sasl.oauthbearer.config"))
    except Exception as exc:  # the application's callback: whatever it raises is its refusal
        raise AuthenticationError(f"The oauth_cb token callback failed ({type(exc).__name__}); see its "
                                  "own log.") from None
    if not isinstance(answer, tuple) or len(answer) not in (2, 4) or not isinstance(answer[0], str):
        raise ConfigError("oauth_cb must return (token, expiry time) or (token, expiry time, principal, "
                          "extensions), as confluent-kafka's token callback does.")
    return answer[0], dict(answer[3] or {}) if len(answer) == 4 else {}


def _b64url(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def _token_from_endpoint(settings: Mapping[str, Any]) -> str:
    """An access token of the client-credentials grant (RFC 6749 4.4), as librdkafka's OIDC method asks."""
    url = str(settings.get("sasl.oauthbearer.token.endpoint.url", ""))
    if not url:
        raise ConfigError("sasl.oauthbearer.method=oidc needs sasl.oauthbearer.token.endpoint.url.")
    form = {"grant_type": "client_credentials"}
    if settings.get("sasl.oauthbearer.scope"):
        form["scope"] = str(settings["sasl.oauthbearer.scope"])
    credentials = f"{settings.get('sasl.oauthbearer.client.id', '')}:" \
                  f"{settings.get('sasl.oauthbearer.client.secret', '')}"
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), headers={
        "Authorization": f"Basic {base64.b64encode(credentials.encode()).decode()}",
        "Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"})
    context = ssl.create_default_context(cafile=settings.get("https.ca.location") or None)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            token = json.load(response).get("access_token")
    except (OSError, ValueError) as exc:
        raise AuthenticationError(f"No token from {url}: {exc}") from None
    if not isinstance(token, str) or not token:
        raise AuthenticationError(f"The token endpoint {url} answered no access_token.")
    return token


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
