"""Every broker-facing `strom` command against the 3-node Apache Kafka cluster (replication factor 3,
min.insync.replicas 2), with the output a user sees: topics, produce, consume (with a group under the
classic and the KIP-848 consumer protocol), groups, transactions."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import TopicPartition

from cli.strom_cli import Strom, unique
from strom.kafka import clients
from support.apache_kafka import KafkaCluster

pytestmark = pytest.mark.slow

JOIN_TIMEOUT_S = 120  # a first group waits for __consumer_offsets and group.initial.rebalance.delay.ms


@pytest.fixture
def kafka_strom(kafka_cluster: KafkaCluster, monkeypatch, capsysbinary) -> Strom:
    return Strom(kafka_cluster.bootstrap_servers, monkeypatch, capsysbinary)


def _json(strom: Strom, *args: str):
    return json.loads(strom.ok(*args, "--output", "json").out)


def _wait(condition, timeout: float = JOIN_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.3)


def test_topics_are_replicated_by_the_broker_default_or_as_asked(kafka_strom: Strom) -> None:
    strom = kafka_strom
    topic, pair = unique("kt"), unique("kt2")
    assert strom.ok("topics", "create", topic, "--partitions", "3").lines == [f"created {topic} with 3 "
                                                                             "partition(s)"]
    strom.ok("topics", "create", pair, "--replication-factor", "2")
    described = _json(strom, "topics", "describe", topic)
    assert [len(p["replicas"]) for p in described["partitions"]] == [3, 3, 3]
    assert all(sorted(p["isr"]) == sorted(p["replicas"]) and p["leader"] in p["replicas"]
               for p in described["partitions"])
    assert [len(p["replicas"]) for p in _json(strom, "topics", "describe", pair)["partitions"]] == [2]
    table = strom.ok("topics", "describe", topic).lines
    assert table[0] == f"{topic}: 3 partition(s)"
    assert table[1].split("\t") == ["partition", "leader", "replicas", "isr", "log start offset",
                                    "end offset"]
    refused = strom.fails("topics", "create", unique("kt4"), "--replication-factor", "4")
    assert refused.startswith("error: Could not create topic"), refused
    assert "only 3 broker(s) are registered" in refused, refused
    listed = _json(strom, "topics", "list")
    assert {"topic": topic, "partitions": 3} in listed
    assert strom.ok("topics", "alter-config", topic, "--set", "retention.ms=60000").lines == [
        f"altered {topic}: retention.ms=60000"]
    assert strom.ok("topics", "add-partitions", topic, "--partitions", "4").lines == [f"{topic}: 3 -> 4 "
                                                                                      "partition(s)"]
    strom.ok("produce", topic, "-p", "0", stdin=b"a\nb\nc\n")
    assert _json(strom, "topics", "delete-records", topic, "-p", "0", "--before", "2") == [
        {"partition": 0, "log_start_offset": 2}]
    assert strom.ok("topics", "delete", topic, pair).lines == [f"deleted {topic}", f"deleted {pair}"]
    assert not {topic, pair} & {t["topic"] for t in _json(strom, "topics", "list")}  # on every broker


def test_produce_and_consume_keys_with_acks_all_on_three_replicas(kafka_strom: Strom) -> None:
    strom = kafka_strom
    topic = unique("kr")
    strom.ok("topics", "create", topic, "--partitions", "2")
    strom.ok("produce", topic, "-K", ":", stdin=b"".join(b"k%d:v%d\n" % (i, i) for i in range(20)))
    lines = strom.ok("consume", topic, "-o", "beginning", "-e", "-f", "%k=%s\n").lines
    assert sorted(lines) == sorted(f"k{i}=v{i}" for i in range(20))


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_consumes_commits_and_shows_its_protocol(kafka_strom: Strom, kafka_cluster: KafkaCluster,
                                                        protocol: str) -> None:
    """`strom consume --group` under either group protocol; `strom groups list|describe` show the type,
    state, members and assignment as kafka-consumer-groups does."""
    strom = kafka_strom
    topic, group = unique("kg"), unique(f"g-{protocol}")
    strom.ok("topics", "create", topic, "--partitions", "2")
    strom.ok("produce", topic, "-K", ":", stdin=b"".join(b"k%d:v%d\n" % (i, i) for i in range(6)))
    first = strom.ok("consume", topic, "--group", group, "-X", f"group.protocol={protocol}", "-o",
                     "beginning", "-e").lines
    assert sorted(first) == [f"v{i}" for i in range(6)]
    strom.ok("produce", topic, "-p", "1", stdin=b"x\ny\n")
    assert {"group": group, "type": protocol, "state": "empty"} in _json(strom, "groups", "list")
    rows = {r["partition"]: r for r in _json(strom, "groups", "describe", group)}
    assert rows[1]["lag"] == 2 and rows[0]["lag"] == 0
    assert sum(r["committed_offset"] for r in rows.values()) == 6

    consumer = clients.consumer(kafka_cluster.bootstrap_servers, group,
                                **{"client.id": "live-member", "group.protocol": protocol})
    consumer.subscribe([topic])
    try:
        _wait(lambda: consumer.poll(0.2) is None and len(consumer.assignment()) == 2)
        result = strom.ok("groups", "describe", group, "--members")
        header = result.err.splitlines()[0]
        assert header.startswith(f"group {group}: {protocol} protocol, stable, assignor ")
        assert header.endswith("1 member(s)")
        table = [line.split("\t") for line in result.lines]
        assert table[0][:5] == ["member", "host", "client id", "partitions", "assignment"]
        assert table[1][2:5] == ["live-member", "2", f"{topic}-0, {topic}-1"]
        if protocol == "consumer":  # the coordinator's target assignment (ConsumerGroupDescribe)
            assert table[0][5] == "target assignment" and table[1][5] == f"{topic}-0, {topic}-1"
        else:
            assert len(table[0]) == 5
        assert {"group": group, "type": protocol, "state": "stable"} in _json(strom, "groups", "list")
    finally:
        consumer.close()
    # the group resumes where it committed: only the two records produced since
    assert strom.ok("consume", topic, "--group", group, "-X", f"group.protocol={protocol}", "-e").lines == [
        "x", "y"]
    reset = _json(strom, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert [r["new_offset"] for r in reset] == [0, 0] and sum(r["old_offset"] for r in reset) == 8
    assert strom.ok("groups", "delete", group).lines == [f"deleted {group}"]


def test_transactions_are_found_on_their_coordinator_and_aborted(kafka_strom: Strom,
                                                                 kafka_cluster: KafkaCluster) -> None:
    """The coordinator of a transactional id is one of three brokers and a partition's leader another:
    `strom transactions` asks the right one."""
    strom = kafka_strom
    topic, transactional_id = unique("ktx"), unique("tx")
    strom.ok("topics", "create", topic, "--partitions", "3")
    producer = clients.producer(kafka_cluster.bootstrap_servers, **{"transactional.id": transactional_id})
    producer.init_transactions(60)
    for _ in range(2):
        producer.begin_transaction()
        producer.produce(topic, b"committed", partition=0)
        producer.commit_transaction(60)
    # librdkafka 2.16 ends transactions as transaction version 1: the epoch stays (KIP-890's v2 bumps it
    # with every transaction, though the cluster finalized transaction.version=2)
    assert _json(strom, "transactions", "describe", transactional_id)["producer_epoch"] == 0
    producer.begin_transaction()
    for partition in range(3):
        producer.produce(topic, b"open", partition=partition)
    assert producer.flush(30) == 0
    listed = _json(strom, "transactions", "list", "--state", "Ongoing")
    assert [r["transactional.id"] for r in listed if r["transactional.id"] == transactional_id] == [
        transactional_id]
    described = _json(strom, "transactions", "describe", transactional_id)
    assert described["state"] == "Ongoing"
    assert sorted(described["partitions"]) == [f"{topic}-{p}" for p in range(3)]
    producers = _json(strom, "transactions", "describe-producers", "--topic", topic)
    assert sorted(r["partition"] for r in producers) == [0, 1, 2]
    assert all(r["producer_id"] == described["producer_id"] for r in producers)
    assert {r["partition"]: r["open_transaction_start_offset"] for r in producers} == {0: 4, 1: 0, 2: 0}
    assert _json(strom, "transactions", "find-hanging", "--topic", topic, "--max-transaction-timeout",
                 "0") == []  # open, but its coordinator runs it: not hanging
    aborted = strom.ok("transactions", "abort", "--transactional-id", transactional_id).lines
    # Kafka's coordinator bumps the epoch to fence, aborts, answers CONCURRENT_TRANSACTIONS; the retried
    # InitProducerId bumps it again and leaves the id Empty
    assert aborted == [f"aborted {transactional_id}: now Empty, producer epoch "
                       f"{described['producer_epoch'] + 2}"]
    assert strom.ok("consume", topic, "-o", "beginning", "-e").lines == ["committed", "committed"]
    assert "not known to the broker" in strom.fails("transactions", "describe", unique("absent"))
    reader = clients.consumer(kafka_cluster.bootstrap_servers)
    try:  # 2 records and 2 commit markers, the aborted record and its abort marker
        assert reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1] == 6
    finally:
        reader.close()
