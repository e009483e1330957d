"""Per-listener broker configs as Kafka resolves them: ``listener.name.<listener>.<mechanism>.<key>`` over
``listener.name.<listener>.<key>`` over ``<key>``: the OAUTHBEARER validator each listener gets from them,
a listener's own ``ssl.*`` keys, and the JAAS configs Kafka takes per listener and mechanism (PLAIN's
users, the unsecured OAUTHBEARER validator's options), whose passwords are never shown
(tests/fidelity/test_secured.py gives Apache Kafka and strom broker the same keys)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from security.conftest import LISTENERS, PASSWORDS, secured_config, start_secured
from strom.broker import EmbeddedBroker
from strom.broker.broker import bind_listeners
from strom.broker.config import BrokerConfig
from strom.broker.security.oauthbearer import SignedJwtValidator, UnsecuredJwsValidator, validator
from strom.errors import BrokerStartError, ConfigError
from support.identity_provider import IdentityProvider
from support.secured_clients import (
    certificate_issuer,
    first_error,
    logs_in,
    oauth_settings,
    sasl_settings,
    unsecured_jws,
)

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="carol-jaas-pw";'
OAUTH_JAAS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
              'unsecuredValidatorPrincipalClaimName="user" unsecuredValidatorRequiredScope="kafka";')

VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
UNSECURED = "org.apache.kafka.common.security.oauthbearer.OAuthBearerUnsecuredValidatorCallbackHandler"


def test_the_mechanism_s_key_wins_over_the_listener_s_over_the_broker_s():
    config = BrokerConfig({
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "connections.max.reauth.ms": "1000",
        "listener.name.OAUTH.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oauth.connections.max.reauth.ms": "2000",
        "listener.name.oauth.oauthbearer.connections.max.reauth.ms": "3000",
        "listener.name.oauth.sasl.oauthbearer.expected.issuer": "listener",
        "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.issuer": "mechanism"})
    oauth = config.listener("oauth", "OAUTHBEARER")
    assert oauth["sasl.enabled.mechanisms"] == "OAUTHBEARER"  # any case names the listener
    assert oauth["connections.max.reauth.ms"] == 3000
    assert oauth["sasl.oauthbearer.expected.issuer"] == "mechanism"
    assert config.listener("OAUTH")["sasl.oauthbearer.expected.issuer"] == "listener"
    assert config.listener("OAUTH", "SCRAM-SHA-512")["connections.max.reauth.ms"] == 2000
    assert config.listener("SASL_SSL", "OAUTHBEARER")["connections.max.reauth.ms"] == 1000
    assert config.listener("SASL_SSL")["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"


def test_describe_configs_lists_the_listener_keys_as_given_hiding_what_kafka_hides():
    """Kafka's DescribeConfigs lists a broker's static ``listener.name.*`` keys by the type of the key they
    override; a mechanism's key other than its own few (``sasl.jaas.config``, the callback handler
    classes, ``connections.max.reauth.ms``) has no type Kafka knows, so it is hidden like a password."""
    given = {"listener.name.oauth.ssl.keystore.location": "/keys/oauth.pem",
             "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
             "listener.name.ssl.ssl.key.password": "key-pw",
             "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
             "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
             "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience": "cluster"}
    assert BrokerConfig(given).static_listener_keys == {
        **given, "listener.name.ssl.ssl.key.password": None,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": None,
        "listener.name.oauth.oauthbearer.sasl.oauthbearer.expected.audience": None}


@pytest.mark.parametrize(("key", "value", "said"), [
    ("listener.name.sasl_ssl.ssl.keystore.password", "x", "strom broker takes listener.name.<listener>."),
    ("listener.name.sasl_ssl.sasl.jaas.config", PLAIN_JAAS, "strom broker takes listener.name.<listener>."),
    ("listener.name.sasl_ssl.ssl.client.auth", "always", "expected one of none, requested, required"),
    ("listener.name.sasl_ssl.plain.sasl.oauthbearer.expected.issuer", "x", "strom broker takes"),
    ("listener.name.sasl_ssl.sasl.enabled.mechanisms", "GSSAPI", "expected a comma-separated list"),
    ("listener.name.oauth.oauthbearer.sasl.oauthbearer.jwks.endpoint.url", "ftp://idp/jwks",
     "expected an http://, https:// or file: URL"),
    ("sasl.server.callback.handler.class", "com.example.Mine", "strom's two validators"),
])
def test_a_key_strom_does_not_serve_per_listener_or_a_bad_value_is_refused(key, value, said):
    with pytest.raises(ConfigError, match=said) as refused:
        BrokerConfig({key: value})
    assert key in str(refused.value)


def test_each_listener_gets_the_validator_its_keys_name():
    with IdentityProvider() as idp:
        config = BrokerConfig({
            "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
            "listener.name.dev.oauthbearer.sasl.server.callback.handler.class": UNSECURED,
            "listener.name.none.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
            "listener.name.none.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": "",
            "listener.name.slow.sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "500",
            "listener.name.slow.sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "100"})
        fetched: dict = {}
        signed = [validator(config.listener(name, "OAUTHBEARER"), fetched) for name in ("a", "b")]
        assert all(isinstance(v, SignedJwtValidator) for v in signed)
        assert signed[0].keys is signed[1].keys and idp.jwks_fetches == 1  # one fetch for both
        signed[0].close()
        assert isinstance(validator(config.listener("dev", "OAUTHBEARER"), {}), UnsecuredJwsValidator)
        with pytest.raises(BrokerStartError, match=r"listener NONE names .*ValidatorCallbackHandler, which "
                                                   r"needs sasl.oauthbearer.jwks.endpoint.url"):
            validator(config.listener("none", "OAUTHBEARER"), {})
        with pytest.raises(BrokerStartError, match=r"listener SLOW: .*backoff.max.ms \(100\) is less than "):
            validator(config.listener("slow", "OAUTHBEARER"), {})


@pytest.mark.parametrize(("value", "said"), [
    ('org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="s3cr3t-x"',
     "one login module"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule always user_carol="s3cr3t-x";',
     "a control flag"),
    ('org.apache.kafka.common.security.plain.PlainLoginModule required user_carol "s3cr3t-x";', "options"),
    ('org.apache.kafka.common.security.scram.ScramLoginModule required user_carol="s3cr3t-x";',
     "PlainLoginModule for PLAIN"),
])
def test_a_bad_jaas_config_is_refused_without_showing_it(value, said):
    with pytest.raises(ConfigError, match=said) as refused:
        BrokerConfig({"listener.name.sasl_ssl.plain.sasl.jaas.config": value})
    assert "s3cr3t-x" not in str(refused.value)
    jaas = BrokerConfig({"listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS}).listener(
        "SASL_SSL", "PLAIN")["sasl.jaas.config"]
    assert jaas.plain_users() == {"carol": "carol-jaas-pw"} and "carol-jaas-pw" not in f"{jaas!r} {jaas}"


def test_the_unsecured_validator_takes_its_options_from_the_listener_s_jaas_config():
    config = BrokerConfig({"listener.name.dev.oauthbearer.sasl.jaas.config": OAUTH_JAAS.replace(
        ";", ' unsecuredValidatorScopeClaimName="roles" unsecuredValidatorAllowableClockSkewMs="5000";')})
    judge = validator(config.listener("dev", "OAUTHBEARER"), {})
    now = time.time()
    assert judge.principal(unsecured_jws({"user": "ann", "roles": ["kafka"], "exp": now - 2})) == "ann"
    for claims in ({"sub": "ann", "roles": ["kafka"], "exp": now + 60}, {"user": "ann", "exp": now + 60},
                   {"user": "ann", "roles": ["kafka"], "exp": now - 10}):
        with pytest.raises(Exception, match=r"principal|scope|expired"):
            judge.principal(unsecured_jws(claims))
    default = validator(config.listener("other", "OAUTHBEARER"), {})
    assert default.principal(unsecured_jws({"sub": "ann", "exp": now + 60})) == "ann"
    bad = BrokerConfig({"listener.name.dev.oauthbearer.sasl.jaas.config": OAUTH_JAAS.replace(
        ";", ' unsecuredValidatorAllowableClockSkewMs="-1";')})
    with pytest.raises(BrokerStartError, match=r"AllowableClockSkewMs in listener\.name\.dev"):
        validator(bad.listener("dev", "OAUTHBEARER"), {})


def test_a_listener_s_unreadable_keystore_is_named_with_its_prefix(pki, tmp_path):
    own = {"listener.name.SSL.ssl.keystore.location": "/nonexistent.pem"}  # any case names the listener
    config = BrokerConfig(secured_config(pki, **own))
    with pytest.raises(BrokerStartError, match=r"Cannot read listener\.name\.ssl\.ssl\.keystore\.location="
                                               r"/nonexistent.pem: no such file"):
        bind_listeners(config, "127.0.0.1", 0, None, tmp_path / "dynamic-configs.json")


@pytest.fixture(scope="module")
def own_keys(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[EmbeddedBroker]:
    """The secured broker with a fourth listener, OTHER (SASL_SSL), holding its own certificate (from
    another CA) and asking for client certificates; PLAIN on SASL_PLAINTEXT and OAUTHBEARER on SASL_SSL
    configured by JAAS."""
    broker = start_secured(tmp_path_factory.mktemp("own-keys"), pki, **{
        "listeners": f"{LISTENERS},OTHER://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "OTHER:SASL_SSL",
        "listener.name.other.ssl.keystore.location": str(pki.other_broker),
        "listener.name.other.ssl.client.auth": "required",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": OAUTH_JAAS})
    yield broker
    broker.stop()


def test_a_listener_s_own_ssl_keys(own_keys, pki):
    other = own_keys.listeners["OTHER"]
    assert certificate_issuer(own_keys.listeners["SASL_SSL"]) == "strom test CA"
    assert certificate_issuer(other) == "another CA"  # listener.name.other.ssl.keystore.location
    alice = sasl_settings(other, pki.other_ca, "alice", PASSWORDS["alice"])
    assert first_error(alice).str()  # a SASL_SSL listener asking for a client certificate refuses none
    assert logs_in({**alice, "ssl.certificate.location": str(pki.client_cert),
                    "ssl.key.location": str(pki.client_key)})
    assert logs_in(sasl_settings(own_keys.listeners["SASL_SSL"], pki.ca, "alice", PASSWORDS["alice"]))


def test_plain_users_of_a_listener_s_jaas_config(own_keys, pki):
    def plain(listener: str, user: str, password: str) -> dict:
        ca = pki.ca if listener == "SASL_SSL" else None
        return sasl_settings(own_keys.listeners[listener], ca, user, password, "PLAIN")
    assert logs_in(plain("SASL_PLAINTEXT", "carol", "carol-jaas-pw"))
    assert "Authentication failed" in first_error(plain("SASL_PLAINTEXT", "carol", "wrong")).str()
    # with a JAAS config the listener knows only its JAAS users, as Kafka's PLAIN server
    assert "Authentication failed" in first_error(plain("SASL_PLAINTEXT", "alice", PASSWORDS["alice"])).str()
    assert logs_in(plain("SASL_SSL", "alice", PASSWORDS["alice"]))  # no JAAS config: the SCRAM users


def test_the_unsecured_oauthbearer_options_of_a_listener_s_jaas_config(own_keys, pki):
    now = time.time()

    def oauth(claims: dict) -> dict:
        return oauth_settings(own_keys.listeners["SASL_SSL"], pki.ca,
                              unsecured_jws({"exp": now + 600, **claims}))
    admin = AdminClient(oauth({"user": "admin", "scope": ["kafka"]}))
    admin.poll(1)  # serves the token callback
    assert admin.list_topics(timeout=10).topics is not None
    for claims in ({"sub": "admin", "scope": ["kafka"]}, {"user": "admin"}):
        assert first_error(oauth(claims)).name() == "_AUTHENTICATION", claims
