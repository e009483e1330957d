"""Where strom broker deliberately answers otherwise than Apache Kafka (docs/broker.md, "Differences
from Apache Kafka"): each difference is asserted as documented, so a change on either side shows."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType
from fidelity_helpers import Peers, Target, error_name

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def outcome(future) -> str | tuple[str, str]:
    try:
        future.result(30)
        return "ok"
    except KafkaException as exc:
        return error_name(exc), exc.args[0].str()


def test_a_bad_config_value_is_refused_in_other_words(peers: Peers) -> None:
    def scenario(t: Target):
        name = t.name_of("bad-value")
        return outcome(t.admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "soon"})])[name])
    kafka, strom = peers.both(scenario)
    assert kafka[0] == strom[0] == "INVALID_CONFIG"
    assert "retention.ms" in kafka[1] and "soon" in kafka[1]
    assert strom[1] == ("Invalid value 'soon' for topic config 'retention.ms': "
                        "expected an integer >= 0 (or -1).")


def test_describe_configs_lists_only_the_configs_strom_serves(peers: Peers) -> None:
    def scenario(t: Target):
        resource = ConfigResource(ResourceType.TOPIC, t.topic("all-configs"))
        return sorted(t.admin.describe_configs([resource])[resource].result(30))
    kafka, strom = peers.both(scenario)
    assert set(strom) < set(kafka) and "unclean.leader.election.enable" not in strom


def test_a_new_group_is_assigned_without_the_initial_rebalance_delay(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("first-join")
        consumer = t.consumer(t.name_of("first-join"))
        start = time.monotonic()
        consumer.subscribe([topic])
        while not consumer.assignment() and time.monotonic() - start < 60:
            consumer.poll(0.05)
        waited = time.monotonic() - start
        consumer.close()
        return waited
    kafka, strom = peers.both(scenario)
    assert kafka >= 3.0  # group.initial.rebalance.delay.ms=3000, Kafka's default
    assert strom < kafka - 1.0  # 0 for strom broker: one application on one machine
