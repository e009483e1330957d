"""Group protocol details real clients notice: the KIP-394 member id handshake, error answers in
every JoinGroup version, offset commits Kafka refuses while a group has active members, and
OffsetDelete.
kafka-python and aiokafka go through the handshake in tests/broker/test_other_clients.py."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import time

import kafka.errors
import pytest
from broker_helpers import unique
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from strom.kafka import clients
from strom.kafka.wire import WireClient

pytestmark = pytest.mark.broker


def _join_request(version: int, group: str, member_id: str, instance: str | None = None):
    """A JoinGroup request of `version`, with the fields that version has."""
    module = importlib.import_module(f"kio.schema.join_group.v{version}.request")
    values = {"group_id": group, "session_timeout": datetime.timedelta(seconds=10),
              "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": member_id,
              "group_instance_id": instance, "protocol_type": "consumer", "reason": None,
              "protocols": (module.JoinGroupRequestProtocol(name="range", metadata=b"m"),)}
    names = {f.name for f in dataclasses.fields(module.JoinGroupRequest)}
    return module.JoinGroupRequest(**{k: v for k, v in values.items() if k in names})


@pytest.mark.parametrize("version", [4, 5, 6, 7])
def test_join_without_member_id_is_answered_member_id_required(broker, version):
    group = unique(f"kip394-v{version}")
    with WireClient(broker.bootstrap_servers) as client:
        first = client.send(_join_request(version, group, ""))
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        joined = client.send(_join_request(version, group, first.member_id))
        assert (joined.error_code, joined.member_id) == (ErrorCode.none, first.member_id)
        assert joined.generation_id == 1 and joined.leader == first.member_id
        if version >= 5:  # group.instance.id exists from v5 on
            static = client.send(_join_request(version, unique("static"), "", instance="instance-1"))
            assert static.error_code == ErrorCode.none, "static members join without the handshake"


@pytest.mark.parametrize("version", range(8))
def test_join_errors_are_answered_in_every_version(broker, version):
    with WireClient(broker.bootstrap_servers) as client:
        refused = client.send(_join_request(version, unique("errors"), "never-handed-out"))
        assert refused.error_code == ErrorCode.unknown_member_id
        if version < 4:
            joined = client.send(_join_request(version, unique("old"), ""))
            assert joined.error_code == ErrorCode.none and joined.member_id, "no handshake before v4"


def _wait_for_assignment(consumer, timeout: float = 30.0) -> list[TopicPartition]:
    deadline = time.monotonic() + timeout
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the member got no partitions"
        consumer.poll(0.2)
    return consumer.assignment()


def test_simple_commit_is_refused_while_the_group_has_members(broker):
    topic, group = unique("simple-commit"), unique("g")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    member = clients.consumer(broker.bootstrap_servers, group)
    member.subscribe([topic])
    _wait_for_assignment(member)
    member.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)

    outsider = clients.consumer(broker.bootstrap_servers, group)  # assign(): generation -1, no member id
    outsider.assign([TopicPartition(topic, 0, 0)])
    with pytest.raises(KafkaException) as refused:
        outsider.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    assert refused.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
    assert member.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 5, "progress kept"

    member.close()  # the group is empty again: a simple commit is fine
    outsider.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    assert outsider.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 2
    outsider.close()



def test_offset_delete_spares_the_topics_members_subscribe_to(broker):
    """kafka-python's admin deletes committed offsets (OffsetDelete) as Kafka allows it."""
    used, other, group = unique("used"), unique("other"), unique("g")
    clients.create_topics(broker.bootstrap_servers, {used: 1, other: 1})
    member = clients.consumer(broker.bootstrap_servers, group)
    member.subscribe([used])
    _wait_for_assignment(member)
    member.commit(offsets=[TopicPartition(used, 0, 3), TopicPartition(other, 0, 4)], asynchronous=False)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        wanted = [KafkaTopicPartition(used, 0), KafkaTopicPartition(other, 0),
                  KafkaTopicPartition(unique("missing"), 0)]
        results = admin.delete_group_offsets(group, wanted)
        assert [results[tp] for tp in wanted] == [
            kafka.errors.GroupSubscribedToTopicError, kafka.errors.NoError,
            kafka.errors.UnknownTopicOrPartitionError]
        committed = member.committed([TopicPartition(used, 0), TopicPartition(other, 0)], timeout=10)
        assert [tp.offset for tp in committed] == [3, -1001], "only the unsubscribed topic lost its offset"
        member.close()
        assert admin.delete_group_offsets(group, wanted[:1]) == {wanted[0]: kafka.errors.NoError}
        with pytest.raises(kafka.errors.GroupIdNotFoundError):
            admin.delete_group_offsets(unique("no-such-group"), wanted[:1])
    finally:
        admin.close()
    outsider = clients.consumer(broker.bootstrap_servers, group)
    assert outsider.committed([TopicPartition(used, 0)], timeout=10)[0].offset == -1001
    outsider.close()


def test_restarted_static_member_gets_its_partitions_back_without_a_rebalance(broker):
    """KIP-345 with confluent-kafka: the other member sees no revocation when a static member restarts."""
    topic, group = unique("static"), unique("g")
    clients.create_topics(broker.bootstrap_servers, {topic: 4})
    revoked: list[list[TopicPartition]] = []

    def member(instance: str):
        consumer = clients.consumer(broker.bootstrap_servers, group, **{
            "group.instance.id": instance, "session.timeout.ms": 10_000, "heartbeat.interval.ms": 300})
        return consumer

    steady = member("steady")
    steady.subscribe([topic], on_revoke=lambda _c, partitions: revoked.append(partitions))
    restarting = member("restarting")
    restarting.subscribe([topic])
    deadline = time.monotonic() + 30
    while not len(steady.assignment()) == len(restarting.assignment()) == 2:  # range: two each
        assert time.monotonic() < deadline, "the two members did not share the partitions"
        steady.poll(0.1)
        restarting.poll(0.1)
    before = sorted(p.partition for p in restarting.assignment())
    revoked.clear()
    restarting.close()  # a static member does not leave the group on close
    again = member("restarting")
    again.subscribe([topic])
    again_assignment = _wait_for_assignment(again)
    for _ in range(10):  # give a rebalance, if one were started, time to reach the steady member
        steady.poll(0.1)
        again.poll(0.1)
    assert sorted(p.partition for p in again_assignment) == before
    assert revoked == [], "the steady member was not rebalanced"
    again.close()
    steady.close()
