"""strom broker's SASL/OAUTHBEARER: the RFC 7628 exchange, the checks of Kafka's unsecured JWS
validator and of its signed-JWT validator (a JWKS of a throwaway identity provider), then librdkafka
logging in with the unsecured token it makes itself (``enable.sasl.oauthbearer.unsecure.jwt``) and with
signed tokens it fetches from the identity provider (``sasl.oauthbearer.method=oidc``).
tests/fidelity/test_secured.py compares the verdicts on tokens with Apache Kafka's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.static.primitive import i64

from security.conftest import start_secured
from strom.broker.security.oauthbearer import (
    Jwks,
    JwksError,
    OAuthBearerError,
    OAuthBearerServer,
    SignedJwtValidator,
    UnsecuredJwsValidator,
    parse_initial_response,
)
from strom.kafka.security import AuthenticationError, authentication_error, principal
from strom.kafka.wire import WireClient
from strom.kafka.wire_login import sasl_login
from support.identity_provider import AUDIENCE, ISSUER, IdentityProvider
from support.secured_clients import first_error, oauth_settings, unsecured_jws

NOW = 1_800_000_000.0


def validator(**options) -> UnsecuredJwsValidator:
    return UnsecuredJwsValidator(clock=lambda: NOW, **options)


def message(token: str, authzid: str = "", extensions: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01{extensions}\x01".encode()


def test_a_valid_token_names_its_principal():
    token = unsecured_jws({"sub": "alice", "exp": NOW + 60, "iat": NOW - 1, "scope": ["read", "write"]})
    assert validator().principal(token) == "alice"
    assert validator(required_scope=("write",)).principal(token) == "alice"
    by_user = unsecured_jws({"user": "bob", "exp": NOW + 1})
    assert validator(principal_claim="user").principal(by_user) == "bob"
    assert validator(clock_skew_s=30).principal(unsecured_jws({"sub": "alice", "exp": NOW - 10})) == "alice"


@pytest.mark.parametrize(("token", "reason"), [
    (unsecured_jws({"sub": "alice", "exp": NOW - 1}), "expired"),
    (unsecured_jws({"sub": "alice"}), "no expiration time"),
    (unsecured_jws({"sub": "alice", "exp": "soon"}), "no expiration time"),
    (unsecured_jws({"exp": NOW + 60}), "no principal name"),
    (unsecured_jws({"sub": " ", "exp": NOW + 60}), "no principal name"),
    (unsecured_jws({"sub": "alice", "exp": NOW + 60}, alg="HS256"), "'none' for an algorithm"),
    (unsecured_jws({"sub": "alice", "exp": NOW + 60}, signature="c2ln"), "digital signature"),
    (unsecured_jws({"sub": "alice", "exp": NOW + 60, "iat": NOW + 30}), "issue time"),
    (unsecured_jws({"sub": "alice", "exp": NOW + 60, "scope": "read"}), "scope lacks write"),
    ("a.b", "3 dot-separated"),
    ("e30..", "3 dot-separated"),
    ("!!!.e30.", "malformed"),
])
def test_kafkas_checks_refuse(token, reason):
    with pytest.raises(OAuthBearerError, match=reason):
        validator(required_scope=("write",) if "scope" in reason else ()).principal(token)


def test_the_client_initial_response_of_rfc_7628():
    assert parse_initial_response(message("abc.def.", "alice", "traceId=42\x01")) == ("abc.def.", "alice")
    for malformed in (b"n,,\x01auth=Bearer t\x01", b"y,,\x01auth=Bearer t\x01\x01", b"n,,\x01host=x\x01\x01",
                      message("t", extensions="bad_key=1\x01")):
        with pytest.raises(OAuthBearerError):
            parse_initial_response(malformed)


def test_a_refused_token_gets_the_error_challenge_then_fails():
    server = OAuthBearerServer(validator())
    assert json.loads(server.step(message(unsecured_jws({"sub": "alice", "exp": NOW - 1})))) == {
        "status": "invalid_token"}
    assert server.username is None
    with pytest.raises(OAuthBearerError, match="expired"):
        server.step(b"\x01")
    accepted = OAuthBearerServer(validator())
    assert accepted.step(message(unsecured_jws({"sub": "alice", "exp": NOW + 1}), "alice")) == b""
    assert accepted.username == "alice"
    with pytest.raises(OAuthBearerError, match="authorization id"):
        OAuthBearerServer(validator()).step(message(unsecured_jws({"sub": "alice", "exp": NOW + 1}), "bob"))


def test_librdkafka_logs_in_with_its_own_unsecured_token(secured, pki):
    def settings(**extra) -> dict:
        return {"bootstrap.servers": secured.listeners["SASL_SSL"], "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(pki.ca), "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": True, **extra}
    admin = AdminClient(settings(**{"sasl.oauthbearer.config": "principal=alice lifeSeconds=600"}))
    assert admin.list_topics(timeout=10).brokers
    # a token whose principal is in a claim the broker does not read is refused, as by Kafka
    unnamed = settings(**{"sasl.oauthbearer.config": "principal=alice principalClaimName=user"})
    assert first_error(unnamed).name() == "_AUTHENTICATION"


def test_the_wire_client_presents_the_token_and_extensions_librdkafka_would():
    """strom transactions' own wire client takes the OAUTHBEARER settings librdkafka takes: an
    ``oauth_cb`` (with its extensions), and the unsecured token's ``extension_<key>`` options."""
    sent: list[bytes] = []

    def exchange(mechanism: str, token: bytes) -> bytes:
        sent.append(token)
        return b""
    base = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER"}
    sasl_login({**base, "oauth_cb": lambda config: ("t.o.", NOW, "alice", {"traceId": "abc"})}, exchange)
    sasl_login({**base, "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": "principal=alice extension_traceId=abc"}, exchange)
    assert sent[0] == b"n,,\x01auth=Bearer t.o.\x01traceId=abc\x01\x01"
    assert parse_initial_response(sent[1])[0].count(".") == 2 and sent[1].endswith(b"\x01traceId=abc\x01\x01")
    with pytest.raises(AuthenticationError, match=r"oauth_cb token callback failed \(ValueError\)"):
        sasl_login({**base, "oauth_cb": lambda config: int("secret")}, exchange)


def test_the_wire_client_logs_in_with_an_oauth_cb_token_as_librdkafka_does(secured, pki):
    now = time.time()
    tokens = {"alice": unsecured_jws({"sub": "alice", "exp": now + 600}),
              "expired": unsecured_jws({"sub": "alice", "exp": now - 600})}

    def settings(name: str) -> dict:
        return {**oauth_settings(secured.listeners["SASL_SSL"], pki.ca, tokens[name]),
                "oauth_cb": lambda _config: (tokens[name], now + 600, "alice", {"traceId": "abc"})}
    with WireClient(secured.listeners["SASL_SSL"], settings=settings("alice")) as client:
        assert client.send(ListTransactionsRequest(state_filters=(), producer_id_filters=(),
                                                   duration_filter=i64(-1))).error_code == ErrorCode.none
    admin = AdminClient(settings("alice"))
    admin.poll(1)  # serves the token callback
    assert admin.list_topics(timeout=10).brokers
    with pytest.raises(AuthenticationError, match="did not accept the OAUTHBEARER token"):
        WireClient(secured.listeners["SASL_SSL"], settings=settings("expired"))
    assert first_error(settings("expired")).name() == "_AUTHENTICATION"


@pytest.mark.slow
def test_the_cli_logs_in_with_librdkafka_s_unsecured_token_and_its_extensions(secured, pki):
    settings = {"bootstrap.servers": secured.listeners["SASL_SSL"], "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(pki.ca), "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": "true",
                "sasl.oauthbearer.config": "principal=alice extension_traceId=abc"}
    for command in (("transactions", "list"), ("topics", "list")):
        done = strom_cli(*command, settings=settings)
        assert done.returncode == 0, done.stderr


def test_a_client_refused_its_token_is_told_about_the_token_not_a_password():
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "oauthbearer",
                "sasl.oauthbearer.config": "principal=alice"}
    said = str(authentication_error(settings, "b:9093", "SASL authentication error: invalid_token"))
    assert "did not accept the OAUTHBEARER token: check its principal claim and expiry" in said
    assert "password" not in said
    assert principal(settings) == "the principal of the OAUTHBEARER token (User:<its sub claim>)"


@pytest.fixture(scope="module")
def idp():
    with IdentityProvider() as provider:
        yield provider


@pytest.fixture(scope="module")
def jwks(idp):
    keys = Jwks(idp.jwks_url)
    yield keys
    keys.close()


def signed(jwks: Jwks, **options) -> SignedJwtValidator:
    return SignedJwtValidator(jwks, **{"audience": (AUDIENCE,), "issuer": ISSUER, **options})


def test_a_signed_token_names_its_principal(idp, jwks):
    assert signed(jwks).principal(idp.token()) == "alice"
    by_client = idp.token(idp.claims(client_id="svc"))
    assert signed(jwks, principal_claim="client_id").principal(by_client) == "svc"
    within_skew = idp.claims(nbf=int(time.time()) + 10)
    assert signed(jwks, clock_skew_s=30).principal(idp.token(within_skew)) == "alice"
    assert signed(jwks).principal(idp.token(kid=None)) == "alice"  # no kid: the key its signature fits
    assert signed(jwks, audience=()).principal(idp.token(idp.claims(aud=None))) == "alice"


@pytest.mark.parametrize(("change", "reason"), [
    ({"claims": {"exp": -600}}, "expired"),
    ({"claims": {"exp": -10}}, "expired"),  # within the clock skew, yet refused (as by Apache Kafka 4.1)
    ({"claims": {"exp": None}}, "exp"),
    ({"claims": {"iat": None}}, "iat"),
    ({"claims": {"nbf": 600}}, "not yet valid"),
    ({"claims": {"aud": "another-cluster"}}, "audience"),
    ({"claims": {"iss": "https://elsewhere"}}, "issuer"),
    ({"claims": {"sub": None}}, "no principal name"),
    ({"claims": {"sub": 42}}, "subject must be a string"),
    ({"claims": {"scope": ["read", " "]}}, "blank or non-string scope"),
    ({"stranger": True}, "signature"),
    ({"kid": "unknown-kid"}, "matches the token's kid 'unknown-kid'"),
    ({"options": {"audience": ()}}, "audience"),  # an aud claim, no audience expected: refused (Kafka too)
])
def test_kafkas_signed_token_checks_refuse(idp, jwks, change, reason):
    now = int(time.time())
    claims = idp.claims(**{k: (now + v if k in ("exp", "nbf") and v is not None else v)
                           for k, v in change.get("claims", {}).items()})
    token = idp.token(claims, stranger=change.get("stranger", False), kid=change.get("kid", ""))
    with pytest.raises(OAuthBearerError, match=f"(?i){reason}"):
        signed(jwks, **change.get("options", {})).principal(token)


def test_an_unsecured_token_is_refused_where_tokens_are_signed(idp, jwks):
    with pytest.raises(OAuthBearerError, match="could not validate"):
        signed(jwks).principal(unsecured_jws(idp.claims()))


def test_the_jwks_is_fetched_at_once_then_every_refresh_interval(idp):
    before = idp.jwks_fetches
    keys = Jwks(idp.jwks_url, refresh_s=0.2)
    try:
        assert idp.jwks_fetches == before + 1  # at start-up, not at the first login
        time.sleep(1.1)
        assert idp.jwks_fetches >= before + 4
    finally:
        keys.close()
    stopped = idp.jwks_fetches
    time.sleep(0.5)
    assert idp.jwks_fetches <= stopped + 1  # a refresh under way when closed may still end


def test_a_failed_fetch_is_tried_again_after_a_doubling_backoff(idp, caplog):
    idp.jwks_failures, before = 2, idp.jwks_fetches
    keys = Jwks(idp.jwks_url, backoff_s=0.05, backoff_max_s=5)
    keys.close()
    assert idp.jwks_fetches == before + 3 and keys.keys
    waits = [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]
    assert [w.rsplit("; ", 1)[1] for w in waits] == ["trying again in 50 ms (attempt 1)",
                                                     "trying again in 100 ms (attempt 2)"]
    assert "HTTP Error 503" in waits[0]


def test_an_unreachable_jwks_gives_up_when_the_backoff_ends():
    started = time.monotonic()
    with pytest.raises(JwksError, match=r"cannot fetch the JWKS from http://127.0.0.1:9/jwks: .*refused "
                                        r"\(after [3-9] attempts\)"):
        Jwks("http://127.0.0.1:9/jwks", backoff_s=0.05, backoff_max_s=0.3)
    assert time.monotonic() - started < 2


def test_a_refresh_that_fails_keeps_the_keys_and_a_new_kid_is_fetched_at_once(idp, caplog):
    keys = Jwks(idp.jwks_url, refresh_s=0.1, backoff_s=0.01, backoff_max_s=0.02)
    try:
        idp.jwks_failures = 1_000_000
        time.sleep(0.5)
        assert signed(keys).principal(idp.token()) == "alice"
        assert "keeping the 1 keys fetched before" in caplog.text
        idp.jwks_failures = 0
        idp.rotate()  # a token of the new key logs in before the next scheduled refresh
        keys.refresh_s = 3600
        time.sleep(0.3)
        assert signed(keys).principal(idp.token()) == "alice"
    finally:
        keys.close()
        idp.jwks_failures = 0


@pytest.mark.slow
def test_librdkafka_logs_in_with_tokens_of_the_identity_provider(idp, pki, tmp_path):
    fetches = idp.jwks_fetches
    broker = start_secured(tmp_path, pki, **{"sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
                                             "sasl.oauthbearer.expected.audience": AUDIENCE,
                                             "sasl.oauthbearer.expected.issuer": ISSUER})
    try:
        assert idp.jwks_fetches == fetches + 1  # at start-up, as Kafka's broker does
        def oidc(path: str = "") -> dict:
            return {"bootstrap.servers": broker.listeners["SASL_SSL"], "security.protocol": "SASL_SSL",
                    "ssl.ca.location": str(pki.ca), "sasl.mechanism": "OAUTHBEARER",
                    "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "alice",
                    "sasl.oauthbearer.client.secret": "alice-secret",
                    "sasl.oauthbearer.token.endpoint.url": idp.token_url + path}
        assert AdminClient(oidc()).list_topics(timeout=10).brokers
        assert first_error(oidc("/invalid")).name() == "_AUTHENTICATION"
        # librdkafka's own unsecured token is refused by a broker that checks signatures
        unsecured = {**oidc(), "sasl.oauthbearer.method": "default",
                     "sasl.oauthbearer.config": "principal=alice",
                     "enable.sasl.oauthbearer.unsecure.jwt": True}
        for key in ("sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
                    "sasl.oauthbearer.token.endpoint.url"):
            unsecured.pop(key)
        assert first_error(unsecured).name() == "_AUTHENTICATION"
        # the CLI logs in the same way, librdkafka's commands and the ones with a wire client of strom's own
        for command in (("transactions", "list"), ("topics", "list")):
            done = strom_cli(*command, settings=oidc())
            assert done.returncode == 0, done.stderr
        refused = strom_cli("transactions", "list", settings=oidc("/invalid"))
        assert refused.returncode == 2 and refused.stderr.startswith("error: Cannot log in"), refused.stderr
        assert "alice-secret" not in refused.stdout + refused.stderr
    finally:
        broker.stop()


def strom_cli(*args: str, settings: dict) -> subprocess.CompletedProcess:
    options = [arg for key, value in settings.items() if key != "bootstrap.servers"
               for arg in ("-X", f"{key}={value}")]
    command = [str(Path(sys.executable).with_name("strom")), *args, "-b", settings["bootstrap.servers"],
               *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_session_is_reauthenticated_on_its_connection_before_the_token_expires(secured, pki):
    """KIP-368: SaslAuthenticate tells the token's remaining life; librdkafka logs in again on the same
    connection before it ends (a broker that refused would see it reconnect instead)."""
    stats: list[dict] = []
    producer = Producer({
        "bootstrap.servers": secured.listeners["SASL_SSL"], "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca), "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice lifeSeconds=3", "statistics.interval.ms": 500,
        "stats_cb": lambda text: stats.append(json.loads(text))})
    delivered = []
    deadline = time.monotonic() + 7
    while time.monotonic() < deadline:  # past two token lifetimes
        producer.produce("reauthenticated", b"x", on_delivery=lambda err, _msg: delivered.append(err))
        producer.poll(0.5)
    producer.flush(10)
    assert delivered and not any(delivered)
    connects = [b["connects"] for b in stats[-1]["brokers"].values()]  # the bootstrap one may be the leader's
    assert max(connects) == 1, f"the session ended in a reconnect, not a re-login: {connects}"
    assert "User:alice re-authenticated on listener SASL_SSL" in secured.log_path.read_text()
