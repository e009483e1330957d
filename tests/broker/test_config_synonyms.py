"""DescribeConfigs' synonyms as BrokerConfig lists them: each layer a config is set in, under each of its
names, in Kafka's order of precedence (tests/fidelity/test_config_fidelity.py compares them with Kafka)."""

from __future__ import annotations

from strom.broker.config import CLUSTER_DEFAULT, DEFAULT, PER_BROKER, STATIC, BrokerConfig, Synonym


def test_a_config_set_in_every_layer_lists_them_all_and_kafkas_other_names_below():
    config = BrokerConfig({"log.retention.ms": "1000"})
    config.set_dynamic(PER_BROKER, {"log.retention.ms": "3000"})
    config.set_dynamic(CLUSTER_DEFAULT, {"log.retention.ms": "2000"})
    assert config.synonyms("log.retention.ms") == [
        Synonym("log.retention.ms", "3000", PER_BROKER), Synonym("log.retention.ms", "2000", CLUSTER_DEFAULT),
        Synonym("log.retention.ms", "1000", STATIC), Synonym("log.retention.hours", "168", DEFAULT)]
    # only Kafka's own default of another name: listed from the first entry named as asked, so none
    assert BrokerConfig().synonyms("log.roll.ms") == []
    assert BrokerConfig().synonyms("log.segment.bytes") == [
        Synonym("log.segment.bytes", "1073741824", DEFAULT)]


def test_a_listener_key_lists_itself_then_the_key_it_overrides_and_secrets_carry_no_value():
    config = BrokerConfig({"listener.name.ssl.ssl.keystore.location": "/keys/ssl.pem",
                           "ssl.keystore.location": "/keys/all.pem",
                           "listener.name.ssl.ssl.key.password": "pw", "ssl.key.password": "pw2"})
    assert config.synonyms("listener.name.ssl.ssl.keystore.location") == [
        Synonym("listener.name.ssl.ssl.keystore.location", "/keys/ssl.pem", STATIC),
        Synonym("ssl.keystore.location", "/keys/all.pem", STATIC)]
    assert config.synonyms("ssl.keystore.location") == [
        Synonym("ssl.keystore.location", "/keys/all.pem", STATIC)]
    assert config.synonyms("listener.name.ssl.ssl.key.password") == [
        Synonym("listener.name.ssl.ssl.key.password", None, STATIC),
        Synonym("ssl.key.password", None, STATIC)]
