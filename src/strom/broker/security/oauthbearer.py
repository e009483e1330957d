"""SASL/OAUTHBEARER (RFC 7628) on the server side, with the token checks of Kafka's two validators:

- ``SignedJwtValidator`` (Kafka's ``OAuthBearerValidatorCallbackHandler``, used when
  ``sasl.oauthbearer.jwks.endpoint.url`` is set): a JWT signed by a key of the identity provider's JWKS,
  with the expected audience and issuer, ``exp`` and ``iat``, within ``sasl.oauthbearer.clock.skew.seconds``;
- ``UnsecuredJwsValidator`` (Kafka's default ``OAuthBearerUnsecuredValidatorCallbackHandler``): an
  unsecured JWS (``"alg": "none"``, no signature). Such tokens prove nothing about who sent them: Kafka
  offers this validator for development and tests, and so does strom (docs/security.md).

A refused token is answered as RFC 7628 says: an error challenge (``{"status": "invalid_token"}``),
which the client acknowledges with a lone ``0x01``; only then does the exchange fail.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jwt

MECHANISM = "OAUTHBEARER"
SEPARATOR = "\x01"
_INITIAL = re.compile(r"n,(?:a=(?P<authzid>[^,]*))?,\x01(?P<pairs>(?:[^\x01]*\x01)*)\x01")
_AUTH = re.compile(r"(?i:bearer) +(?P<token>[-_.a-zA-Z0-9]+)")
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")


class OAuthBearerError(Exception):
    """The client's message or token is not acceptable (the reason is logged, never the token)."""


def parse_initial_response(message: bytes) -> tuple[str, str]:
    """The token and the authorization id (may be empty) of an RFC 7628 client initial response
    (``n,a=<authzid>,^Aauth=Bearer <token>^A<key>=<value>^A...^A``). Extensions are accepted and ignored,
    as Kafka's default validator does."""
    match = _INITIAL.fullmatch(message.decode("utf-8"))
    if match is None:
        raise OAuthBearerError("malformed OAUTHBEARER client initial response")
    pairs = dict(pair.split("=", 1) for pair in match["pairs"].split(SEPARATOR) if "=" in pair)
    auth = _AUTH.fullmatch(pairs.pop("auth", ""))
    if auth is None:
        raise OAuthBearerError("no 'auth=Bearer <token>' in the client initial response")
    if any(not _EXTENSION_KEY.fullmatch(key) for key in pairs):
        raise OAuthBearerError("malformed SASL extension name")
    return auth["token"], match["authzid"] or ""


def _decoded(part: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise OAuthBearerError("malformed Base64URL-encoded JSON in the token") from exc
    if not isinstance(value, dict):
        raise OAuthBearerError("a token part is not a JSON object")
    return value


class UnsecuredJwsValidator:
    """Kafka's checks of an unsecured JWS: three dot-separated parts, the last (the signature) empty,
    ``alg`` ``none``; a string principal claim; a numeric ``exp`` not past and ``iat`` (if given) not in
    the future, each within ``clock_skew_s``; every ``required_scope`` in the scope claim."""

    def __init__(self, principal_claim: str = "sub", scope_claim: str = "scope",
                 required_scope: tuple[str, ...] = (), clock_skew_s: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.principal_claim, self.scope_claim = principal_claim, scope_claim
        self.required_scope, self.clock_skew_s, self.clock = required_scope, clock_skew_s, clock

    def principal(self, token: str) -> str:
        """The principal name the token's claims give; OAuthBearerError if the token is not valid."""
        parts = token.split(".")
        if ".." in token or len(parts) != 3:
            raise OAuthBearerError("an unsecured JWS has 3 dot-separated Base64URL-encoded parts")
        header, claims = _decoded(parts[0]), _decoded(parts[1])
        if header.get("alg") != "none":
            raise OAuthBearerError("an unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise OAuthBearerError("an unsecured JWS must not contain a digital signature")
        name = claims.get(self.principal_claim)
        if not isinstance(name, str) or not name.strip():
            raise OAuthBearerError(f"no principal name in the claim {self.principal_claim!r}")
        self._check_times(claims)
        scope = claims.get(self.scope_claim) or []
        granted = {scope.strip()} if isinstance(scope, str) else {str(s).strip() for s in scope}
        missing = [s for s in self.required_scope if s not in granted]
        if missing:
            raise OAuthBearerError(f"the token's scope lacks {', '.join(missing)}")
        return name

    def _check_times(self, claims: dict[str, Any]) -> None:
        expires, issued = claims.get("exp"), claims.get("iat")
        if not _number(expires):
            raise OAuthBearerError("no expiration time ('exp') in the token")
        if issued is not None and not _number(issued):
            raise OAuthBearerError("the 'iat' claim is not a number")
        now = self.clock()
        if expires <= now - self.clock_skew_s:
            raise OAuthBearerError("the token has expired")
        if issued is not None and (issued > now + self.clock_skew_s or expires <= issued):
            raise OAuthBearerError("the token's issue time is in the future or after its expiry")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# The JWS algorithms each kind of JWK verifies (jose4j, Kafka's JWT library, accepts any but "none").
_ALGORITHMS = {"RSA": ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
               "EC": ("ES256", "ES384", "ES512", "ES256K"), "OKP": ("EdDSA",),
               "oct": ("HS256", "HS384", "HS512")}


class SignedJwtValidator:
    """Kafka's checks of a signed JWT (``BrokerJwtValidator``): its signature by a key of the JWKS at
    ``jwks_url`` (fetched once, then every ``refresh_s`` and whenever a token names an unknown ``kid``);
    ``exp`` and ``iat`` present, ``exp`` not past, ``nbf`` met within ``clock_skew_s``; ``aud`` one of
    ``audience`` (a token with an ``aud`` claim is refused when no audience is expected, as in Kafka);
    ``iss`` equal to ``issuer`` if given; a non-blank string principal claim; scopes that are non-blank
    strings."""

    def __init__(self, jwks_url: str, audience: tuple[str, ...] = (), issuer: str = "",
                 clock_skew_s: float = 30.0, principal_claim: str = "sub", scope_claim: str = "scope",
                 refresh_s: float = 3600.0) -> None:
        self.keys = jwt.PyJWKClient(jwks_url, lifespan=refresh_s, timeout=10, cooldown_duration=1)
        self.audience, self.issuer, self.clock_skew_s = audience, issuer, clock_skew_s
        self.principal_claim, self.scope_claim = principal_claim, scope_claim

    def principal(self, token: str) -> str:
        """The principal name the token's claims give; OAuthBearerError if the token is not valid."""
        try:
            claims = self._verified_claims(token)
        except jwt.PyJWKClientConnectionError as exc:
            raise OAuthBearerError(f"the JWKS could not be fetched: {exc}") from exc
        except jwt.PyJWTError as exc:
            raise OAuthBearerError(f"could not validate the token: {exc}") from exc
        name = claims.get(self.principal_claim)
        if not isinstance(name, str) or not name.strip():
            raise OAuthBearerError(f"no principal name in the claim {self.principal_claim!r}")
        scope = claims.get(self.scope_claim)
        scopes = [scope] if isinstance(scope, str) else scope if isinstance(scope, list) else []
        if any(not isinstance(s, str) or not s.strip() for s in scopes):
            raise OAuthBearerError(f"a blank or non-string scope in the claim {self.scope_claim!r}")
        return name.strip()

    def _verified_claims(self, token: str) -> dict[str, Any]:
        kid = jwt.get_unverified_header(token).get("kid")
        candidates = [self.keys.get_signing_key(kid)] if kid is not None else self.keys.get_signing_keys()
        for key in candidates[:-1]:  # a token without a kid: the first key its signature fits
            try:
                return self._decode(token, key)
            except jwt.InvalidSignatureError:
                continue
        return self._decode(token, candidates[-1])

    def _decode(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        claims = jwt.decode(token, key.key, algorithms=list(_ALGORITHMS.get(key.key_type, ())),
                            audience=list(self.audience) or None, issuer=self.issuer or None,
                            leeway=self.clock_skew_s,
                            options={"require": ["exp", "iat"], "verify_iat": False})
        if not _number(claims["iat"]):
            raise jwt.InvalidTokenError("the 'iat' claim is not a number")
        if claims["exp"] <= time.time():  # Apache Kafka 4.1 refuses it too, whatever the clock skew
            raise jwt.ExpiredSignatureError("Signature has expired")
        return claims


class TokenValidator(Protocol):
    def principal(self, token: str) -> str: ...


def validator(config: Mapping[str, Any]) -> TokenValidator:
    """The validator a broker with ``config`` judges OAUTHBEARER tokens with: signed JWTs when a JWKS
    endpoint is configured, unsecured JWS otherwise (Kafka's default)."""
    url = config["sasl.oauthbearer.jwks.endpoint.url"]
    if not url:
        return UnsecuredJwsValidator()  # Kafka's takes its options from JAAS, not the sasl.oauthbearer.* keys
    key = "sasl.oauthbearer."
    audience = tuple(a.strip() for a in config[key + "expected.audience"].split(",") if a.strip())
    return SignedJwtValidator(url, audience, config[key + "expected.issuer"],
                              config[key + "clock.skew.seconds"], config[key + "sub.claim.name"],
                              config[key + "scope.claim.name"],
                              config[key + "jwks.endpoint.refresh.ms"] / 1000)


class OAuthBearerServer:
    """One OAUTHBEARER exchange: ``step`` takes each client message and answers it; ``username`` is set
    once the client is authenticated."""

    mechanism_name = MECHANISM

    def __init__(self, validator: TokenValidator) -> None:
        self.validator = validator
        self.username: str | None = None
        self.expires_at: float | None = None  # the accepted token's exp (seconds since the epoch)
        self._refused: str | None = None

    def step(self, message: bytes) -> bytes:
        """The answer to the client's message: empty when authenticated, the error challenge when the
        token was refused; OAuthBearerError once the client acknowledged that challenge, or for a
        malformed message."""
        if self._refused is not None:
            raise OAuthBearerError(self._refused)
        token, authzid = parse_initial_response(message)
        try:
            name = self.validator.principal(token)
        except OAuthBearerError as exc:
            self._refused = str(exc)
            return json.dumps({"status": "invalid_token"}).encode()
        if authzid and authzid != name:
            raise OAuthBearerError("the authorization id differs from the token's principal")
        self.username, self.expires_at = name, float(_decoded(token.split(".")[1])["exp"])
        return b""
