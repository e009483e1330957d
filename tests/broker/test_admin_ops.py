"""Admin operations through confluent-kafka (timestamps, DeleteRecords, config changes, cluster) and
compaction and retention as a running broker applies them."""

from __future__ import annotations

import time

import pytest
from broker_helpers import drain, unique
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from strom.broker import EmbeddedBroker
from strom.kafka import clients

pytestmark = pytest.mark.broker


def _produce(bootstrap: str, topic: str, records, **overrides) -> None:
    producer = clients.producer(bootstrap, **overrides)
    for key, value, timestamp in records:
        producer.produce(topic, key=key, value=value, timestamp=timestamp, partition=0)
        producer.flush(10)  # one batch per record, so lookups must look inside batches too
    assert producer.flush(10) == 0


def test_offsets_for_times_finds_the_first_record_at_or_after(broker):
    topic = unique("times")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    producer = clients.producer(broker.bootstrap_servers, **{"linger.ms": 1000})
    base = int(time.time() * 1000) - 60_000  # recent: older records may go to retention at any moment
    for i in range(10):  # one batch holding timestamps base + 1000 .. base + 10000
        producer.produce(topic, value=b"%d" % i, timestamp=base + 1000 * (i + 1), partition=0)
    assert producer.flush(10) == 0
    consumer = clients.consumer(broker.bootstrap_servers, None)
    found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=10)
    beyond = consumer.offsets_for_times([TopicPartition(topic, 0, base + 99_999)], timeout=10)
    consumer.close()
    assert found[0].offset == 4
    assert beyond[0].offset == -1


def test_delete_records_moves_the_low_watermark(broker):
    topic = unique("delete-records")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    _produce(broker.bootstrap_servers, topic, [(None, b"%d" % i, 0) for i in range(5)])
    admin = clients.admin(broker.bootstrap_servers)
    result = admin.delete_records([TopicPartition(topic, 0, 3)])
    deleted = next(iter(result.values())).result(10)
    assert deleted.low_watermark == 3
    consumer = clients.consumer(broker.bootstrap_servers, None)
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (3, 5)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    assert [m.value() for m in drain(consumer, 2)] == [b"3", b"4"]
    consumer.close()


def test_incremental_alter_configs_and_describe_cluster(broker):
    topic = unique("alter")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    admin = clients.admin(broker.bootstrap_servers)
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "1234", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result(10)
    assert configs["retention.ms"].value == "1234"
    assert configs["cleanup.policy"].value == "delete,compact"  # appended to "delete" as Kafka does

    reset = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([reset])[reset].result(10)
    configs = next(iter(admin.describe_configs([ConfigResource("topic", topic)]).values())).result(10)
    assert configs["retention.ms"].value == "604800000" and configs["retention.ms"].is_default

    bad = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match=r"retention\.ms"):
        admin.incremental_alter_configs([bad])[bad].result(10)

    cluster = admin.describe_cluster().result(10)
    assert [node.port for node in cluster.nodes] == [int(broker.bootstrap_servers.split(":")[1])]


@pytest.mark.slow
def test_running_broker_compacts_and_applies_retention():
    config = {"log.cleaner.backoff.ms": 200, "log.retention.check.interval.ms": 200}
    with EmbeddedBroker(config=config) as running:
        bootstrap = running.bootstrap_servers
        clients.create_topics(bootstrap, {"table": 1}, config={
            "cleanup.policy": "compact", "segment.bytes": "1024", "delete.retention.ms": "0"})
        clients.create_topics(bootstrap, {"events": 1},
                              config={"segment.bytes": "1024", "retention.ms": "1000"})
        now = int(time.time() * 1000)
        updates = [(b"key-%d" % (i % 5), b"value-%d" % i, now) for i in range(60)]
        _produce(bootstrap, "table", [*updates, (b"key-0", None, now)])
        _produce(bootstrap, "events", [(None, bytes(200), now - 10_000) for _ in range(30)]
                 + [(None, b"fresh", now)])
        time.sleep(2)  # cleaner and retention run every 200 ms

        consumer = clients.consumer(bootstrap, None, **{"isolation.level": "read_uncommitted"})
        high = consumer.get_watermark_offsets(TopicPartition("table", 0), timeout=10)[1]
        consumer.assign([TopicPartition("table", 0, OFFSET_BEGINNING)])
        table = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (table and table[-1][0] == high - 1):
            message = consumer.poll(0.3)
            if message is not None and message.error() is None:
                table.append((message.offset(), message.key(), message.value()))
        events_low, events_high = consumer.get_watermark_offsets(TopicPartition("events", 0), timeout=10)
        consumer.close()

    latest = {key: (offset, value) for offset, key, value in table}
    assert high == 61
    assert len(table) < 30, "superseded records were compacted away"
    assert latest[b"key-1"] == (56, b"value-56")  # offsets are preserved
    assert latest[b"key-0"][1] is None  # the delete is the last word on key-0
    assert [offset for offset, _, _ in table] == sorted({offset for offset, _, _ in table})
    assert events_high == 31 and events_low > 0, "expired segments were deleted"


def test_dynamic_broker_and_group_configs_apply_at_once_and_survive_a_restart(tmp_path):
    """A dynamic message.max.bytes refuses a larger batch at once on a topic without its own value;
    it and a group's config are still there after a restart (kept in the data directory)."""
    with EmbeddedBroker(data_dir=tmp_path) as own:
        bootstrap = own.bootstrap_servers
        clients.create_topics(bootstrap, {"small": 1})
        admin = clients.admin(bootstrap)
        node = str(admin.list_topics(timeout=10).controller_id)
        set_ = AlterConfigOpType.SET
        for resource in (ConfigResource("BROKER", node, incremental_configs=[
                             ConfigEntry("message.max.bytes", "2000", incremental_operation=set_)]),
                         ConfigResource("GROUP", "tuned", incremental_configs=[ConfigEntry(
                             "consumer.heartbeat.interval.ms", "6000", incremental_operation=set_)])):
            admin.incremental_alter_configs([resource])[resource].result(10)
        producer = clients.producer(bootstrap, **{"message.max.bytes": 100_000, "message.timeout.ms": 5000})
        errors = []
        producer.produce("small", bytes(5000), on_delivery=lambda error, _: errors.append(error))
        producer.flush(10)
        assert [e.name() for e in errors] == ["MSG_SIZE_TOO_LARGE"]
        own.restart()
        admin = clients.admin(bootstrap)
        described = {}
        for resource in (ConfigResource("BROKER", node), ConfigResource("GROUP", "tuned"),
                         ConfigResource("TOPIC", "small")):
            described.update(admin.describe_configs([resource])[resource].result(10))
        assert described["message.max.bytes"].value == "2000"
        assert described["max.message.bytes"].value == "2000"  # the topic inherits it
        assert described["consumer.heartbeat.interval.ms"].value == "6000"
