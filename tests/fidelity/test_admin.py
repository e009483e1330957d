"""Topic administration and configs as admin clients see them: refusals with their codes and the
messages clients show, describe and alter (incremental and legacy), authorized operations."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from fidelity_helpers import Peers, Target, error_name
from kio.schema.describe_configs.v1 import request as describe_configs
from kio.schema.incremental_alter_configs.v0 import request as incremental_alter_configs
from kio.static.primitive import i8

pytestmark = [pytest.mark.broker, pytest.mark.slow]

# Topic configs strom broker serves whose defaults follow Kafka's (broker-level defaults the same).
COMPARED_KEYS = ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
                 "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms",
                 "min.cleanable.dirty.ratio", "max.message.bytes", "flush.messages",
                 "message.timestamp.type", "compression.type")
# min.insync.replicas is left out: the test Kafka node sets it in its server.properties (a broker
# source), strom broker has it as a plain default.


def create(t: Target, topic: NewTopic, validate_only: bool = False) -> str | tuple[str, str]:
    try:
        t.admin.create_topics([topic], validate_only=validate_only)[topic.topic].result(30)
        return "created"
    except KafkaException as exc:
        return error_name(exc), exc.args[0].str()


def outcome(future) -> str | tuple[str, str]:
    try:
        future.result(30)
        return "ok"
    except KafkaException as exc:
        return error_name(exc), exc.args[0].str()


def configs_of(t: Target, topic: str, keys=COMPARED_KEYS) -> dict:
    t.metadata_settled()
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = t.admin.describe_configs([resource])[resource].result(30)
    return {k: (e.value, e.source, e.is_default, e.is_read_only) for k, e in entries.items() if k in keys}


def test_creating_an_existing_topic(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("exists")
        return create(t, NewTopic(topic, 1, 1))
    assert peers.same(scenario) == ("TOPIC_ALREADY_EXISTS", "Topic '<exists>' already exists.")


def test_creating_with_a_bad_replication_factor(peers: Peers) -> None:
    def scenario(t: Target):
        return create(t, NewTopic(t.name_of("rf"), 1, 3))[0]
    assert peers.same(scenario) == "INVALID_REPLICATION_FACTOR"


def test_creating_with_an_unknown_config(peers: Peers) -> None:
    def scenario(t: Target):
        return create(t, NewTopic(t.name_of("bad-option"), 1, 1, config={"bad_option": "1"}))
    assert peers.same(scenario) == ("INVALID_CONFIG", "Unknown topic config name: bad_option")


def test_creating_with_a_bad_config_value(peers: Peers) -> None:
    def scenario(t: Target):
        return create(t, NewTopic(t.name_of("bad-value"), 1, 1, config={"retention.ms": "soon"}))[0]
    assert peers.same(scenario) == "INVALID_CONFIG"


def test_creating_with_an_illegal_name(peers: Peers) -> None:
    def scenario(t: Target):
        return create(t, NewTopic("bad name!", 1, 1))[0]
    assert peers.same(scenario) == "TOPIC_EXCEPTION"


def test_creating_with_validate_only(peers: Peers) -> None:
    def scenario(t: Target):
        name = t.name_of("validated")
        created = create(t, NewTopic(name, 2, 1), validate_only=True)
        return created, name in t.admin.list_topics(timeout=10).topics
    assert peers.same(scenario) == ("created", False)


def test_creating_with_a_replica_assignment_on_this_broker(peers: Peers) -> None:
    def scenario(t: Target):
        name = t.name_of("assigned")
        created = create(t, NewTopic(name, 2, replica_assignment=[[t.node_id], [t.node_id]]))
        t.wait_for_topic(name, 2)
        elsewhere = create(t, NewTopic(t.name_of("elsewhere"), 1, replica_assignment=[[t.node_id + 5]]))[0]
        return created, elsewhere
    assert peers.same(scenario) == ("created", "INVALID_REPLICA_ASSIGNMENT")


def test_adding_partitions(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("grow", partitions=2)
        fewer = outcome(t.admin.create_partitions([NewPartitions(topic, 1)])[topic])[0]
        more = outcome(t.admin.create_partitions([NewPartitions(topic, 3)])[topic])
        assigned = outcome(t.admin.create_partitions(
            [NewPartitions(topic, 5, replica_assignment=[[t.node_id], [t.node_id]])])[topic])
        t.wait_for_topic(topic, 5)
        absent = t.name_of("absent")
        unknown = outcome(t.admin.create_partitions([NewPartitions(absent, 3)])[absent])[0]
        return fewer, more, assigned, unknown
    assert peers.same(scenario) == ("INVALID_PARTITIONS", "ok", "ok", "UNKNOWN_TOPIC_OR_PART")


def test_deleting_an_unknown_topic(peers: Peers) -> None:
    def scenario(t: Target):
        name = t.name_of("never")
        return outcome(t.admin.delete_topics([name])[name])[0]
    assert peers.same(scenario) == "UNKNOWN_TOPIC_OR_PART"


def test_describe_configs_of_a_new_topic(peers: Peers) -> None:
    def scenario(t: Target):
        return configs_of(t, t.topic("described", **{"retention.ms": "3600000", "cleanup.policy": "compact"}))
    described = peers.same(scenario)
    assert described["retention.ms"][0] == "3600000" and described["segment.bytes"][2] is True


def test_describe_configs_of_an_unknown_topic(peers: Peers) -> None:
    def scenario(t: Target):
        resource = ConfigResource(ResourceType.TOPIC, t.name_of("unknown"))
        return outcome(t.admin.describe_configs([resource])[resource])[0]
    assert peers.same(scenario) == "UNKNOWN_TOPIC_OR_PART"


def test_incremental_alter_set_delete_append(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("altered")
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
        first = outcome(t.admin.incremental_alter_configs([resource])[resource])
        after_set = configs_of(t, topic, ("retention.ms", "cleanup.policy"))
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
        second = outcome(t.admin.incremental_alter_configs([resource])[resource])
        return first, after_set, second, configs_of(t, topic, ("retention.ms",))
    peers.same(scenario)


def test_incremental_alter_with_a_bad_value(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("bad-alter")
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "later", incremental_operation=AlterConfigOpType.SET)])
        return outcome(t.admin.incremental_alter_configs([resource])[resource])[0]
    assert peers.same(scenario) == "INVALID_CONFIG"


def test_legacy_alter_configs_replaces_the_topic_configs(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("legacy", **{"retention.ms": "3600000"})
        resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "600000"})
        done = outcome(t.admin.alter_configs([resource])[resource])
        return done, configs_of(t, topic, ("retention.ms", "segment.ms"))
    done, configs = peers.same(scenario)
    assert done == "ok" and configs["segment.ms"][0] == "600000" and configs["retention.ms"][2] is True


def test_authorized_operations_without_an_authorizer(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("operations")
        cluster = t.admin.describe_cluster(include_authorized_operations=True).result(30)
        topics = t.admin.describe_topics(__import__("confluent_kafka").TopicCollection([topic]),
                                         include_authorized_operations=True)[topic].result(30)
        plain = t.admin.describe_cluster().result(30)
        return (sorted(op.name for op in cluster.authorized_operations),
                sorted(op.name for op in topics.authorized_operations), plain.authorized_operations)
    cluster, topic, plain = peers.same(scenario)
    assert "IDEMPOTENT_WRITE" in cluster and "READ" in topic and plain is None


def _broker_alter(t: Target, name: str, *entries: ConfigEntry):
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=list(entries))
    return outcome(t.admin.incremental_alter_configs([resource])[resource])


def _described(t: Target, resource_type: ResourceType, name: str, keys: tuple[str, ...]) -> dict:
    t.metadata_settled()
    resource = ConfigResource(resource_type, name)
    entries = t.admin.describe_configs([resource])[resource].result(30)
    return {k: (e.value, e.source, e.is_read_only) for k, e in entries.items() if k in keys}


def _cluster_default(t: Target, key: str, value: str | None) -> tuple[str, dict]:
    """SET (or DELETE, value None) the cluster-wide default of a broker config (resource name empty,
    which confluent-kafka cannot send), then what DescribeConfigs lists there."""
    alter = incremental_alter_configs.IncrementalAlterConfigsRequest(validate_only=False, resources=(
        incremental_alter_configs.AlterConfigsResource(resource_type=i8(4), resource_name="", configs=(
            incremental_alter_configs.AlterableConfig(name=key, config_operation=i8(0 if value else 1),
                                                      value=value),)),))
    describe = describe_configs.DescribeConfigsRequest(include_synonyms=False, resources=(
        describe_configs.DescribeConfigsResource(resource_type=i8(4), resource_name="",
                                                 configuration_keys=None),))
    with t.wire() as client:
        code = client.send(alter).responses[0].error_code.name
        t.metadata_settled()
        listed = client.send(describe).results[0].configs
    return code, {c.name: (c.value, c.config_source) for c in listed if c.name == key}


def test_dynamic_broker_configs_change_at_run_time_per_broker_and_cluster_wide(peers: Peers) -> None:
    """IncrementalAlterConfigs on this broker (its node id) and on the cluster default (empty name):
    the value, its source and the topics' inherited value change at once; a static key is refused."""
    key, topic_key = "log.cleaner.delete.retention.ms", "delete.retention.ms"

    def scenario(t: Target):
        topic, node = t.topic("inherits"), str(t.node_id)
        try:
            cluster = _cluster_default(t, key, "86400002")
            from_cluster = configs_of(t, topic, (topic_key,))
            per_broker = _broker_alter(t, node, ConfigEntry(key, "86400001",
                                                            incremental_operation=AlterConfigOpType.SET))
            on_broker = _described(t, ResourceType.BROKER, node, (key,))  # this broker's value wins
            on_topic = configs_of(t, topic, (topic_key,))
        finally:
            delete = ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
            deleted = (_broker_alter(t, node, delete), _cluster_default(t, key, None))
        static = _broker_alter(t, node, ConfigEntry("auto.create.topics.enable", "false",
                                                     incremental_operation=AlterConfigOpType.SET))
        return (cluster, from_cluster, per_broker, on_broker, on_topic, deleted,
                configs_of(t, topic, (topic_key,)), static[0])
    observed = peers.same(scenario)
    assert observed[1][topic_key][0] == "86400002" and observed[4][topic_key][0] == "86400001"
    assert observed[6][topic_key][0] == "86400000" and observed[7] == "INVALID_REQUEST"


def test_group_configs_are_stored_and_described(peers: Peers) -> None:
    def scenario(t: Target):
        group = t.name_of("configured")

        def alter(value: str):
            entry = ConfigEntry("consumer.session.timeout.ms", value,
                                incremental_operation=AlterConfigOpType.SET)
            resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
            return outcome(t.admin.incremental_alter_configs([resource])[resource])
        keys = ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms")
        return (alter("50000"), _described(t, ResourceType.GROUP, group, keys), alter("1000")[0],
                _described(t, ResourceType.GROUP, group, keys))
    observed = peers.same(scenario)
    assert observed[0] == "ok" and observed[1]["consumer.session.timeout.ms"][0] == "50000"
    assert observed[2] == "INVALID_CONFIG"
