"""ListOffsets, DeleteRecords, compaction, and consumer groups (offsets, lag, describe, list, delete)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec
from fidelity_helpers import Peers, Target, error_name

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def fill(t: Target, topic: str, timestamps: list[int], partition: int = 0, keys: list | None = None) -> None:
    producer = t.producer()
    for i, stamp in enumerate(timestamps):
        producer.produce(topic, f"v{i}".encode(), keys[i] if keys else None, partition=partition,
                         timestamp=stamp)
        producer.flush(30)


def listed(t: Target, topic: str, spec: OffsetSpec) -> tuple:
    try:
        info = t.admin.list_offsets({TopicPartition(topic, 0): spec})[TopicPartition(topic, 0)].result(30)
        return info.offset, info.timestamp
    except KafkaException as exc:
        return error_name(exc)


def test_list_offsets_earliest_latest_on_empty_and_filled(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("ends")
        empty = [listed(t, topic, OffsetSpec.earliest()), listed(t, topic, OffsetSpec.latest())]
        fill(t, topic, [1000, 2000, 3000])
        return empty, [listed(t, topic, OffsetSpec.earliest()), listed(t, topic, OffsetSpec.latest())]
    assert peers.same(scenario) == ([(0, -1), (0, -1)], [(0, -1), (3, -1)])


def test_list_offsets_by_timestamp(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("by-time")
        fill(t, topic, [1000, 3000, 2000, 4000])
        return [listed(t, topic, OffsetSpec.for_timestamp(ts)) for ts in (0, 1000, 1500, 2500, 4000, 4001)]
    assert peers.same(scenario) == [(0, 1000), (0, 1000), (1, 3000), (1, 3000), (3, 4000), (-1, -1)]


def test_list_offsets_max_timestamp(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("max-time")
        empty = listed(t, topic, OffsetSpec.max_timestamp())
        fill(t, topic, [3000, 1000, 5000, 2000, 5000])
        return empty, listed(t, topic, OffsetSpec.max_timestamp())
    assert peers.same(scenario)[1] == (2, 5000)


def test_offsets_for_times_from_a_consumer(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("for-times")
        fill(t, topic, [100, 200, 300])
        consumer = t.consumer()
        found = consumer.offsets_for_times([TopicPartition(topic, 0, 150), TopicPartition(topic, 0, 999)], 30)
        consumer.close()
        return [(f.partition, f.offset) for f in found]
    peers.same(scenario)


def test_list_offsets_on_a_log_append_time_topic(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("append-offsets", **{"message.timestamp.type": "LogAppendTime"})
        fill(t, topic, [1, 2])
        return [listed(t, topic, OffsetSpec.for_timestamp(0))[0],
                listed(t, topic, OffsetSpec.for_timestamp(int(time.time() * 1000) + 600_000))[0]]
    assert peers.same(scenario) == [0, -1]


def test_delete_records_moves_the_log_start(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("delete-records")
        fill(t, topic, [1000] * 5)
        deleted = t.admin.delete_records([TopicPartition(topic, 0, 2)])
        low = next(iter(deleted.values())).result(30).low_watermark
        consumer = t.consumer()
        consumer.assign([TopicPartition(topic, 0, 0)])
        first = None
        deadline = time.monotonic() + 30
        while first is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                first = message.offset()
        consumer.close()
        return low, listed(t, topic, OffsetSpec.earliest()), first
    assert peers.same(scenario) == (2, (2, -1), 2)


def test_delete_records_to_the_end_and_beyond(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("delete-end")
        fill(t, topic, [1000] * 3)
        outcomes = []
        for offset in (10, -1):
            try:
                result = next(iter(t.admin.delete_records([TopicPartition(topic, 0, offset)]).values()))
                outcomes.append(result.result(30).low_watermark)
            except KafkaException as exc:
                outcomes.append(error_name(exc))
        return outcomes
    assert peers.same(scenario) == ["OFFSET_OUT_OF_RANGE", 3]


def test_fetching_past_the_end_resets_as_configured(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("reset")
        fill(t, topic, [1000] * 3)
        outcomes = []
        for reset in ("error", "earliest", "latest"):
            consumer = t.consumer(**{"auto.offset.reset": reset})
            consumer.assign([TopicPartition(topic, 0, 50)])
            outcome = None
            deadline = time.monotonic() + 10
            while outcome is None and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None:
                    outcome = message.error().name() if message.error() else message.offset()
            if outcome is None:
                outcome = ("position", consumer.position([TopicPartition(topic, 0)])[0].offset)
            consumer.close()
            outcomes.append(outcome)
        return outcomes
    assert peers.same(scenario) == ["_AUTO_OFFSET_RESET", 0, ("position", -1001)]


def test_compaction_keeps_the_latest_record_per_key_and_the_tombstones(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("compacted", **{"cleanup.policy": "compact", "segment.ms": "100",
                                        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "600000"})
        producer = t.producer()
        writes = ((b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", None), (b"a", b"3"))
        for key, value in writes:
            producer.produce(topic, value, key)
            producer.flush(30)
        time.sleep(0.5)
        producer.produce(topic, b"roll", b"z")  # rolls the segment: the records above become cleanable
        producer.flush(30)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            consumer = t.consumer()
            consumer.assign([TopicPartition(topic, 0, 0)])
            seen = []
            last = time.monotonic()
            while time.monotonic() - last < 1.0:
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    seen.append((message.offset(), message.key(), message.value()))
                    last = time.monotonic()
            consumer.close()
            if len({key for _, key, _ in seen}) == len(seen):  # one record per key: cleaned
                return seen
            time.sleep(1)
        return "not compacted within 90 s"
    assert peers.same(scenario) == [(3, b"c", b"1"), (4, b"b", None), (5, b"a", b"3"), (6, b"z", b"roll")]


def consume_in_group(t: Target, topic: str, group: str, count: int):
    consumer = t.consumer(group)
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    return consumer


def test_committed_offsets_and_lag(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("lag", partitions=2)
        fill(t, topic, [1000] * 6, partition=0)
        fill(t, topic, [1000] * 2, partition=1)
        group = t.name_of("lag-group")
        consumer = t.consumer(group)
        consumer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 2)],
                        asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 30)
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), 30) for p in (0, 1)]
        consumer.close()
        listed_offsets = t.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        listed_offsets = sorted((p.partition, p.offset) for p in listed_offsets.result(30).topic_partitions)
        return ([(c.partition, c.offset, ends[c.partition][1] - c.offset) for c in committed], listed_offsets)
    assert peers.same(scenario) == ([(0, 4, 2), (1, 2, 0)], [(0, 4), (1, 2)])


def test_offsets_of_an_unknown_group(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("no-group")
        consumer = t.consumer(t.name_of("nobody"))
        committed = consumer.committed([TopicPartition(topic, 0)], 30)
        consumer.close()
        return [(c.offset, c.error) for c in committed]
    assert peers.same(scenario) == [(-1001, None)]


def test_describe_a_stable_group(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("describe-group", partitions=2)
        fill(t, topic, [1000])
        group = t.name_of("described")
        consumer = consume_in_group(t, topic, group, 1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            description = t.admin.describe_consumer_groups([group])[group].result(30)
            if description.state.name == "STABLE":
                break
            consumer.poll(0.2)
        members = [(m.client_id, sorted(p.partition for p in m.assignment.topic_partitions))
                   for m in description.members]
        consumer.close()
        return (description.group_id, description.state.name, description.partition_assignor,
                description.is_simple_consumer_group, members)
    state = peers.same(scenario)
    assert state[1] == "STABLE" and state[4] == [("rdkafka", [0, 1])]


def test_list_groups_by_state_and_type(peers: Peers) -> None:
    def scenario(t: Target):
        from confluent_kafka import ConsumerGroupState, ConsumerGroupType
        topic = t.topic("list-groups")
        group = t.name_of("listed")
        consumer = t.consumer(group)
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        consumer.close()

        def names(**filters):
            result = t.admin.list_consumer_groups(**filters).result(30)
            return sorted((g.group_id, g.state.name, g.type.name)
                          for g in result.valid if g.group_id == group)
        return (names(), names(states={ConsumerGroupState.EMPTY}), names(states={ConsumerGroupState.STABLE}),
                names(types={ConsumerGroupType.CLASSIC}), names(types={ConsumerGroupType.CONSUMER}))
    listed = [("<listed>", "EMPTY", "CLASSIC")]
    assert peers.same(scenario) == (listed, listed, [], listed, [])


def test_delete_groups_empty_or_not(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("delete-group")
        fill(t, topic, [1000])
        group = t.name_of("deleted")
        consumer = consume_in_group(t, topic, group, 1)

        def delete():
            try:
                t.admin.delete_consumer_groups([group])[group].result(30)
                return "deleted"
            except KafkaException as exc:
                return error_name(exc)
        busy = delete()
        consumer.close()
        return busy, delete(), delete()
    assert peers.same(scenario) == ("NON_EMPTY_GROUP", "deleted", "GROUP_ID_NOT_FOUND")


def test_alter_group_offsets(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("alter-offsets")
        fill(t, topic, [1000] * 3)
        group = t.name_of("altered")
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 2)])
        t.admin.alter_consumer_group_offsets([request])[group].result(30)
        listed_offsets = t.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        return [(p.partition, p.offset) for p in listed_offsets.result(30).topic_partitions]
    assert peers.same(scenario) == [(0, 2)]


def test_describe_a_group_with_its_authorized_operations(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("group-operations")
        group = t.name_of("operations")
        consumer = t.consumer(group)
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        consumer.close()
        described = t.admin.describe_consumer_groups([group], include_authorized_operations=True)[group]
        plain = t.admin.describe_consumer_groups([group])[group].result(30)
        operations = sorted(op.name for op in described.result(30).authorized_operations)
        return operations, plain.authorized_operations
    assert peers.same(scenario) == (["ALTER_CONFIGS", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ"], None)
