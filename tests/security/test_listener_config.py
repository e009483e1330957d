"""Per-listener broker configs as Kafka resolves them: ``listener.name.<listener>.<mechanism>.<key>`` over
``listener.name.<listener>.<key>`` over ``<key>``, and the OAUTHBEARER validator each listener gets from
them (tests/fidelity/test_secured.py gives Apache Kafka and strom broker the same keys)."""

from __future__ import annotations

import pytest

from strom.broker.config import BrokerConfig
from strom.broker.security.oauthbearer import SignedJwtValidator, UnsecuredJwsValidator, validator
from strom.errors import BrokerStartError, ConfigError
from support.identity_provider import IdentityProvider

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


@pytest.mark.parametrize(("key", "value", "said"), [
    ("listener.name.sasl_ssl.ssl.client.auth", "required", "strom broker takes listener.name.<listener>."),
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
