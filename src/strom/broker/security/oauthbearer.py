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
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

import jwt

from strom.broker.config import OAUTHBEARER_HANDLERS, BrokerConfig, ListenerConfig
from strom.broker.security.listeners import Listener
from strom.errors import BrokerStartError

log = logging.getLogger(__name__)

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

    def close(self) -> None:
        """Nothing to release: the checks need no keys."""

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


class JwksError(OAuthBearerError):
    """The JWKS could not be fetched or holds no usable key."""


class Jwks:
    """The identity provider's signing keys. Fetched at start-up (as Kafka's broker does: it does not start
    without them), then every ``refresh_s`` in a thread, and during a login whose token names an unknown
    ``kid`` (at most once a second). A failed fetch is tried again after ``backoff_s``, doubling, until
    ``backoff_max_s`` have passed (Kafka's ``sasl.oauthbearer.jwks.endpoint.retry.backoff.*``); a refresh
    that still fails keeps the keys fetched before and logs why."""

    EXPEDITE_COOLDOWN_S = 1.0

    def __init__(self, url: str, refresh_s: float = 3600.0, backoff_s: float = 0.1,
                 backoff_max_s: float = 10.0, timeout_s: float = 10.0) -> None:
        self.url, self.refresh_s, self.timeout_s = url, refresh_s, timeout_s
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self._closed = threading.Event()
        self._expedited_at = 0.0
        self.keys = self._fetch_with_retry()
        log.info("fetched %d signing keys from the JWKS at %s; fetching again every %d s", len(self.keys),
                 url, refresh_s)
        threading.Thread(target=self._refresh_every, name="jwks-refresh", daemon=True).start()

    def signing_keys(self, kid: str | None) -> list[jwt.PyJWK]:
        """The keys that may have signed a token with ``kid`` (every signing key without one); an unknown
        kid fetches the JWKS again first. JwksError if none fits."""
        if kid is None:
            keys = [k for k in self.keys if k.public_key_use in (None, "sig")]
        else:
            keys = self._named(kid)
            if not keys and time.monotonic() - self._expedited_at >= self.EXPEDITE_COOLDOWN_S:
                self._expedited_at = time.monotonic()
                self.keys = self._fetch()
                keys = self._named(kid)
        if not keys:
            raise JwksError(f"no key of the JWKS at {self.url} matches the token's kid {kid!r}")
        return keys

    def close(self) -> None:
        """Stops the refreshes (and any retry waiting)."""
        self._closed.set()

    def _named(self, kid: str) -> list[jwt.PyJWK]:
        return [k for k in self.keys if k.key_id == kid and k.public_key_use in (None, "sig")]

    def _refresh_every(self) -> None:
        while not self._closed.wait(self.refresh_s):
            try:
                self.keys = self._fetch_with_retry()
            except JwksError as exc:
                log.warning("%s; keeping the %d keys fetched before", exc, len(self.keys))

    def _fetch_with_retry(self) -> list[jwt.PyJWK]:
        deadline, wait, attempt = time.monotonic() + self.backoff_max_s, self.backoff_s, 1
        while True:
            try:
                return self._fetch()
            except JwksError as exc:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0 or self._closed.is_set():
                    raise JwksError(f"{exc} (after {attempt} attempt{'s' if attempt > 1 else ''})") from exc
                log.warning("%s; trying again in %d ms (attempt %d)", exc, wait * 1000, attempt)
                self._closed.wait(wait)
                wait, attempt = wait * 2, attempt + 1

    def _fetch(self) -> list[jwt.PyJWK]:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as answer:
                return jwt.PyJWKSet.from_dict(json.load(answer)).keys
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors; bad JSON a ValueError
            reason = exc if isinstance(exc, urllib.error.HTTPError) else getattr(exc, "reason", exc)
            raise JwksError(f"cannot fetch the JWKS from {self.url}: {reason}") from exc
        except jwt.PyJWTError as exc:
            raise JwksError(f"the JWKS at {self.url} holds no usable key: {exc}") from exc


class SignedJwtValidator:
    """Kafka's checks of a signed JWT (``BrokerJwtValidator``): its signature by a key of ``keys``;
    ``exp`` and ``iat`` present, ``exp`` not past, ``nbf`` met within ``clock_skew_s``; ``aud`` one of
    ``audience`` (a token with an ``aud`` claim is refused when no audience is expected, as in Kafka);
    ``iss`` equal to ``issuer`` if given; a non-blank string principal claim; scopes that are non-blank
    strings."""

    def __init__(self, keys: Jwks, audience: tuple[str, ...] = (), issuer: str = "",
                 clock_skew_s: float = 30.0, principal_claim: str = "sub",
                 scope_claim: str = "scope") -> None:
        self.keys = keys
        self.audience, self.issuer, self.clock_skew_s = audience, issuer, clock_skew_s
        self.principal_claim, self.scope_claim = principal_claim, scope_claim

    def principal(self, token: str) -> str:
        """The principal name the token's claims give; OAuthBearerError if the token is not valid."""
        try:
            claims = self._verified_claims(token)
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

    def close(self) -> None:
        self.keys.close()

    def _verified_claims(self, token: str) -> dict[str, Any]:
        candidates = self.keys.signing_keys(jwt.get_unverified_header(token).get("kid"))
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

    def close(self) -> None: ...


def validator(config: ListenerConfig, fetched: dict[tuple, Jwks]) -> TokenValidator:
    """The validator a listener with ``config`` (its OAUTHBEARER view) judges tokens with: signed JWTs
    when a JWKS endpoint is configured (or Kafka's OAuthBearerValidatorCallbackHandler is named), unsecured
    JWS otherwise (Kafka's default). A JWKS is fetched now, once for the listeners that name it alike
    (``fetched``): BrokerStartError if it cannot be."""
    key = "sasl.oauthbearer."
    url, handler = config[key + "jwks.endpoint.url"], config["sasl.server.callback.handler.class"]
    where = f"listener {config.listener}"
    if handler == OAUTHBEARER_HANDLERS[1] or not (url or handler):
        return unsecured_validator(config)
    if not url:
        raise BrokerStartError(f"{where} names {handler}, which needs sasl.oauthbearer.jwks.endpoint.url: "
                               "set it (or listener.name.<listener>.sasl.oauthbearer.jwks.endpoint.url).")
    backoff, backoff_max = key + "jwks.endpoint.retry.backoff.ms", key + "jwks.endpoint.retry.backoff.max.ms"
    if config[backoff_max] < config[backoff]:
        raise BrokerStartError(f"{where}: {backoff_max} ({config[backoff_max]}) is less than {backoff} "
                               f"({config[backoff]}).")
    source = (url, config[key + "jwks.endpoint.refresh.ms"] / 1000, config[backoff] / 1000,
              config[backoff_max] / 1000)
    if source not in fetched:
        try:
            fetched[source] = Jwks(*source)
        except JwksError as exc:
            raise BrokerStartError(f"Cannot start {where}: {exc}. OAUTHBEARER logins need the identity "
                                   "provider's keys: check sasl.oauthbearer.jwks.endpoint.url and that it "
                                   "answers (strom broker, like Kafka's, does not start without them)."
                                   ) from None
    keys = fetched[source]
    audience = tuple(a.strip() for a in config[key + "expected.audience"].split(",") if a.strip())
    return SignedJwtValidator(keys, audience, config[key + "expected.issuer"],
                              config[key + "clock.skew.seconds"], config[key + "sub.claim.name"],
                              config[key + "scope.claim.name"])


def unsecured_validator(config: ListenerConfig) -> UnsecuredJwsValidator:
    """Kafka's unsecured validator with the options it takes from the listener's OAUTHBEARER JAAS config
    (``unsecuredValidatorPrincipalClaimName``, ``...ScopeClaimName``, ``...RequiredScope`` space-separated,
    ``...AllowableClockSkewMs``), not from the sasl.oauthbearer.* keys."""
    jaas = config["sasl.jaas.config"]
    options = {} if jaas is None else {key: value.strip() for key, value in jaas.options.items()}
    skew = options.get("unsecuredValidatorAllowableClockSkewMs") or "0"
    if not skew.isdigit():
        raise BrokerStartError(
            f"listener {config.listener}: unsecuredValidatorAllowableClockSkewMs in listener.name."
            f"{config.listener.lower()}.oauthbearer.sasl.jaas.config must be a non-negative integer "
            f"(milliseconds), not {skew!r}.")
    return UnsecuredJwsValidator(options.get("unsecuredValidatorPrincipalClaimName") or "sub",
                                 options.get("unsecuredValidatorScopeClaimName") or "scope",
                                 tuple(options.get("unsecuredValidatorRequiredScope", "").split()),
                                 int(skew) / 1000)


def listener_validators(config: BrokerConfig, listeners: list[Listener]) -> dict[str, TokenValidator]:
    """The validator of each SASL listener that offers OAUTHBEARER (by name), built at start-up; on a
    failure, the ones built before are closed."""
    built: dict[str, TokenValidator] = {}
    fetched: dict[tuple, Jwks] = {}
    try:
        for listener in listeners:
            mechanisms = config.listener(listener.name)["sasl.enabled.mechanisms"].split(",")
            if listener.spec.uses_sasl and MECHANISM in mechanisms:
                built[listener.name] = validator(config.listener(listener.name, MECHANISM), fetched)
    except BaseException:
        for made in built.values():
            made.close()
        raise
    return built


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
