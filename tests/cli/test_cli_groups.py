"""`strom groups list|describe|reset-offsets|delete` against the broker, for a plain consumer group and a
Decaton-style task subscription (whose group is its subscription id)."""

from __future__ import annotations

import datetime
import json
import threading
import time

import pytest
from confluent_kafka import TopicPartition

from cli.strom_cli import unique
from strom.kafka import clients
from strom.tasks import ProcessorsBuilder, SubscriptionBuilder

pytestmark = pytest.mark.broker


def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


def _rows(strom, *args: str) -> list[dict]:
    return json.loads(strom.ok(*args, "--output", "json").out)


def _committed_group(strom, partitions: int = 2, records: int = 6) -> tuple[str, str]:
    """A topic of `records` records and a group that read all of them and left."""
    topic, group = unique("gt"), unique("g")
    strom.ok("topics", "create", topic, "--partitions", str(partitions))
    strom.ok("produce", topic, "-K", ":", stdin=b"".join(b"k%d:v%d\n" % (i, i) for i in range(records)))
    strom.ok("consume", topic, "--group", group, "-o", "beginning", "-e")
    return topic, group


def test_list_and_describe_a_live_group_with_lag(strom, broker):
    topic, group = _committed_group(strom)
    strom.ok("produce", topic, "-p", "1", stdin=b"x\ny\nz\n")  # 3 records of lag on partition 1
    consumer = clients.consumer(broker.bootstrap_servers, group, **{"client.id": "lag-probe"})
    assigned = threading.Event()
    consumer.subscribe([topic], on_assign=lambda *_: assigned.set())
    try:
        _wait(lambda: consumer.poll(0.1) is None and assigned.is_set())
        listed = _rows(strom, "groups", "list")
        assert {"group": group, "type": "classic", "state": "stable"} in listed
        rows = {r["partition"]: r for r in _rows(strom, "groups", "describe", group)}
        assert set(rows) == {0, 1}
        for row in rows.values():
            assert row["topic"] == topic and row["client_id"] == "lag-probe" and row["member"]
            assert row["lag"] == row["end_offset"] - row["committed_offset"]
        assert rows[1]["lag"] == 3 and rows[0]["lag"] == 0
        table = strom.ok("groups", "describe", group).lines  # piped: tab-separated, nothing cut
        assert table[0].split("\t")[:5] == ["topic", "partition", "committed offset", "end offset", "lag"]
        assert any(line.split("\t")[-1] == "lag-probe" for line in table[1:])
        assert "stop its consumers first" in strom.fails("groups", "reset-offsets", group, "--topic", topic,
                                                         "--to-earliest")
    finally:
        consumer.close()


def test_reset_offsets_every_way_and_dry_run(strom):
    topic, group = _committed_group(strom, partitions=1, records=6)
    reset = lambda *how: {r["partition"]: r["new_offset"]  # noqa: E731
                          for r in _rows(strom, "groups", "reset-offsets", group, "--topic", topic, *how)}
    committed = lambda: {r["partition"]: r["committed_offset"]  # noqa: E731
                         for r in _rows(strom, "groups", "describe", group)}
    assert committed() == {0: 6}
    assert reset("--to-earliest", "--dry-run") == {0: 0}
    assert committed() == {0: 6}
    assert reset("--to-earliest") == {0: 0} and committed() == {0: 0}
    assert reset("--shift-by", "4") == {0: 4}
    assert reset("--shift-by", "-1") == {0: 3}
    assert reset("--to-offset", "99") == {0: 6}  # kept within the log
    assert reset("--to-offset", "2") == {0: 2}
    assert reset("--to-latest") == {0: 6}
    future = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()
    assert reset("--to-datetime", future) == {0: 6}
    assert reset("--to-datetime", "2000-01-01T00:00:00Z") == {0: 0}
    assert strom.ok("consume", topic, "--group", group, "-e").lines == [f"v{i}" for i in range(6)]
    assert "not an ISO date-time" in strom.fails("groups", "reset-offsets", group, "--topic", topic,
                                                  "--to-datetime", "yesterday")


def test_delete_a_group_and_suggest_a_close_name(strom):
    _, group = _committed_group(strom)
    assert f"Did you mean {group!r}" in strom.fails("groups", "describe", group + "x")
    assert strom.ok("groups", "delete", group).lines == [f"deleted {group}"]
    assert "does not exist" in strom.fails("groups", "describe", group)
    assert group not in {r["group"] for r in _rows(strom, "groups", "list")}


def test_describe_shows_a_task_subscriptions_progress(strom, broker):
    topic = unique("jobs")
    strom.ok("topics", "create", topic, "--partitions", "2")
    strom.ok("produce", topic, "-K", ":", stdin=b"".join(b"k%d:%d\n" % (i, i) for i in range(20)))
    subscription_id = unique("mail")
    done = []
    subscription = (SubscriptionBuilder.new_builder(subscription_id)
                    .processors_builder(ProcessorsBuilder.consuming(topic).then_process(
                        lambda _context, task: done.append(task)))
                    .properties({"decaton.commit.interval.ms": 100})
                    .consumer_config({"bootstrap.servers": broker.bootstrap_servers}).build_and_start())
    try:
        def caught_up() -> bool:
            described = strom.run("groups", "describe", subscription_id, "--output", "json")
            if described.code != 0:  # the subscription's consumer has not reached its coordinator yet
                assert "does not exist" in described.err, described.err
                return False
            rows = json.loads(described.out)
            return len(rows) == 2 and all(r["lag"] == 0 and r["member"] for r in rows)
        _wait(caught_up)
        assert len(done) == 20
    finally:
        subscription.close()


def test_describe_a_group_whose_offsets_are_committed_in_transactions(strom, broker):
    """As a SparkStreams application under exactly_once_v2 commits (group = application.id): no member
    ever joins, the offsets come with each transaction."""
    topic, application_id = unique("in"), unique("app")
    strom.ok("topics", "create", topic)
    strom.ok("produce", topic, stdin=b"a\nb\nc\nd\n")
    producer = clients.producer(broker.bootstrap_servers, **{"transactional.id": f"{application_id}-0_0"})
    producer.init_transactions(30)
    producer.begin_transaction()
    consumer = clients.consumer(broker.bootstrap_servers, application_id)
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], consumer.consumer_group_metadata(),
                                         30)
    consumer.close()
    producer.commit_transaction(30)
    assert {"group": application_id, "type": "classic", "state": "empty"} in _rows(strom, "groups", "list")
    (row,) = _rows(strom, "groups", "describe", application_id)
    assert (row["committed_offset"], row["end_offset"], row["lag"], row["member"]) == (3, 4, 1, None)


def test_the_consumer_group_protocol_on_strom_broker_is_one_clear_error(strom):
    """KIP-848's protocol needs Apache Kafka 4.0+; librdkafka alone would wait for an assignment silently."""
    topic = unique("gp")
    strom.ok("topics", "create", topic)
    line = strom.fails("consume", topic, "--group", unique("g"), "-X", "group.protocol=consumer", "-e")
    assert "group.protocol=consumer (KIP-848) needs a broker that offers ConsumerGroupHeartbeat" in line, line
    assert "Remove group.protocol or set it to classic." in line
