"""Configs as Apache Kafka describes them, compared with strom broker: DescribeConfigs' synonyms (every
place a config is set, under each name it has there, in Kafka's order of precedence)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType
from fidelity_helpers import Peers, Target
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.incremental_alter_configs.v1 import request as incremental_alter_configs
from kio.static.primitive import i8

pytestmark = [pytest.mark.broker, pytest.mark.slow]

TOPIC, BROKER = 2, 4
# topic configs whose defaults strom and Kafka share (min.insync.replicas: Kafka 4 sets a cluster default
# of it at start; flush.ms: strom's own default)
TOPIC_KEYS = ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
              "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
              "min.cleanable.dirty.ratio", "max.message.bytes", "flush.messages", "message.timestamp.type",
              "compression.type")
BROKER_KEYS = ("log.retention.ms", "log.segment.bytes", "message.max.bytes", "log.cleanup.policy")
# (broker resource name, key, value): this broker's layer and the cluster default, both of log.retention.ms
DYNAMIC = (("{node}", "log.retention.ms", "604800001"), ("", "log.retention.ms", "604800002"),
           ("", "log.segment.bytes", "1073741823"))


def _alter(t: Target, name: str, key: str, value: str | None) -> str:
    request = incremental_alter_configs.IncrementalAlterConfigsRequest(validate_only=False, resources=(
        incremental_alter_configs.AlterConfigsResource(resource_type=i8(BROKER), resource_name=name, configs=(
            incremental_alter_configs.AlterableConfig(name=key, config_operation=i8(0 if value else 1),
                                                      value=value),)),))
    with t.wire() as client:
        return client.send(request).responses[0].error_code.name


def _described(t: Target, resource_type: int, name: str, keys: tuple[str, ...],
               synonyms: bool = True) -> dict[str, Any]:
    """Each config's (value, source, [(synonym, value, source), ...]), as sent over the wire."""
    request = describe_configs.DescribeConfigsRequest(include_synonyms=synonyms, include_documentation=False,
                                                      resources=(describe_configs.DescribeConfigsResource(
                                                          resource_type=i8(resource_type), resource_name=name,
                                                          configuration_keys=None),))
    with t.wire() as client:
        result = client.send(request).results[0]
    assert result.error_code.name == "none", result
    return {c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms])
            for c in result.configs if c.name in keys}


def test_synonyms_list_each_layer_a_config_is_set_in_kafkas_order(peers: Peers) -> None:
    """A topic's own value, this broker's dynamic config, the cluster default and the default, each under
    its name there (``retention.ms``: ``log.retention.ms``, and Kafka's ``log.retention.hours`` below it);
    a broker's config alike; the cluster default lists only its own layer; without include_synonyms none."""
    def scenario(t: Target):
        topic = t.topic("synonyms", **{"retention.ms": "3600000"})
        node = str(t.node_id)
        try:
            altered = [_alter(t, name.format(node=node), key, value) for name, key, value in DYNAMIC]
            t.metadata_settled()
            return (altered, _described(t, TOPIC, topic, TOPIC_KEYS),
                    _described(t, BROKER, node, BROKER_KEYS), _described(t, BROKER, "", BROKER_KEYS),
                    _described(t, TOPIC, topic, TOPIC_KEYS, synonyms=False),
                    _librdkafka_synonyms(t, topic))
        finally:
            for name, key, _ in DYNAMIC:
                _alter(t, name.format(node=node), key, None)
    altered, topic, broker, cluster, without, librdkafka = peers.same(scenario)
    assert altered == ["none"] * 3
    assert topic["retention.ms"] == ("3600000", 1, [
        ("retention.ms", "3600000", 1), ("log.retention.ms", "604800001", 2),
        ("log.retention.ms", "604800002", 3), ("log.retention.hours", "168", 5)])
    assert topic["segment.bytes"][2] == [("log.segment.bytes", "1073741823", 3),
                                         ("log.segment.bytes", "1073741824", 5)]
    assert topic["segment.ms"] == ("604800000", 5, [])  # Kafka's log.roll.ms has no default: none listed
    assert broker["log.retention.ms"][1:] == (2, [("log.retention.ms", "604800001", 2),
                                                  ("log.retention.ms", "604800002", 3),
                                                  ("log.retention.hours", "168", 5)])
    assert cluster["log.retention.ms"] == ("604800002", 3, [("log.retention.ms", "604800002", 3)])
    assert all(synonyms == [] for _, _, synonyms in without.values())
    assert librdkafka == ["retention.ms", "log.retention.ms", "log.retention.hours"]


def _librdkafka_synonyms(t: Target, topic: str) -> list[str]:
    """The synonyms of ``retention.ms`` as confluent-kafka's describe_configs gives them (librdkafka asks
    for synonyms; it keeps one per name)."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return list(t.admin.describe_configs([resource])[resource].result(30)["retention.ms"].synonyms)


def test_a_listener_s_tls_files_change_only_with_its_prefix_and_only_on_one_broker(peers: Peers) -> None:
    """Kafka's dynamic listener SSL configs: ``ssl.keystore.location`` without the listener prefix, and a
    listener's keystore on the cluster default, are INVALID_REQUEST (a keystore that does not load or
    names another subject is refused alike: tests/broker/test_certificate_rotation.py)."""
    def scenario(t: Target):
        return (_alter(t, str(t.node_id), "ssl.keystore.location", "/nowhere/broker.pem"),
                _alter(t, "", "listener.name.ssl.ssl.keystore.location", "/nowhere/broker.pem"))
    assert peers.same(scenario) == ("invalid_request", "invalid_request")
