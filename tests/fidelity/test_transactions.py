"""Idempotence and transactions as clients see them: duplicates, sequences, epochs, fencing,
read_committed and the last stable offset, timeouts, transactional offsets."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import KafkaException, TopicPartition
from fidelity_helpers import Peers, Target, error_name
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import i8, i16, i32, i64

from strom.broker.log.records import build_batch

pytestmark = [pytest.mark.broker, pytest.mark.slow]

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def new_producer_id(client) -> tuple[int, int]:
    answer = client.send(init_producer_id.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=i64(-1), producer_epoch=i16(-1)))
    assert answer.error_code.name == "none", answer.error_code
    return answer.producer_id, answer.producer_epoch


def send_batch(client, topic: str, producer_id: int, epoch: int, sequence: int, count: int = 2) -> tuple:
    batch = build_batch([(b"k", b"v")] * count, 1_000, producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence)
    answer = client.send(produce.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
        topic_data=(produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=i32(0), records=batch),)),)))
    partition = answer.responses[0].partition_responses[0]
    return partition.error_code.name, partition.base_offset


def list_offset(client, topic: str, timestamp: int,
                isolation: int = READ_UNCOMMITTED) -> tuple[str, int, int]:
    answer = client.send(list_offsets.ListOffsetsRequest(
        replica_id=i32(-1), isolation_level=i8(isolation), topics=(list_offsets.ListOffsetsTopic(
            name=topic, partitions=(list_offsets.ListOffsetsPartition(
                partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(timestamp)),)),)))
    partition = answer.topics[0].partitions[0]
    return partition.error_code.name, partition.offset, partition.timestamp


def read(t: Target, topic: str, isolation: str, quiet_s: float = 3.0) -> list[tuple[int, bytes]]:
    """Every record a fresh consumer sees until nothing new came for `quiet_s`."""
    consumer = t.consumer(**{"isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    last = time.monotonic()
    while time.monotonic() - last < quiet_s:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append((message.offset(), message.value()))
            last = time.monotonic()
    consumer.close()
    return seen


def txn_producer(t: Target, label: str = "txn", **config):
    producer = t.producer(**{"transactional.id": t.name_of(label), **config})
    producer.init_transactions(30)
    return producer


def test_a_retried_batch_is_written_once(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("dup")
        with t.wire() as client:
            pid, epoch = new_producer_id(client)
            first = send_batch(client, topic, pid, epoch, 0)
            again = send_batch(client, topic, pid, epoch, 0)
            after = send_batch(client, topic, pid, epoch, 2)
            return first, again, after, list_offset(client, topic, -1)[1]
    assert peers.same(scenario) == (("none", 0), ("none", 0), ("none", 2), 4)


def test_a_sequence_gap_is_out_of_order(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("gap")
        with t.wire() as client:
            pid, epoch = new_producer_id(client)
            return send_batch(client, topic, pid, epoch, 0), send_batch(client, topic, pid, epoch, 5)
    assert peers.same(scenario)[1][0] == "out_of_order_sequence_number"


def test_an_older_epoch_is_refused_after_a_bump(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("epoch")
        with t.wire() as client:
            pid, epoch = new_producer_id(client)
            return [send_batch(client, topic, pid, epoch, 0),
                    send_batch(client, topic, pid, epoch + 1, 0),
                    send_batch(client, topic, pid, epoch, 2),
                    send_batch(client, topic, pid, epoch + 1, 7)]
    observed = peers.same(scenario)
    assert observed[2][0] == "invalid_producer_epoch"


def test_a_new_producer_may_start_at_any_sequence(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("first-seq")
        with t.wire() as client:
            pid, epoch = new_producer_id(client)
            return send_batch(client, topic, pid, epoch, 3), send_batch(client, topic, pid, epoch, 5)
    peers.same(scenario)


def test_read_committed_skips_aborted_records(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("aborted")
        producer = txn_producer(t)
        producer.begin_transaction()
        producer.produce(topic, b"a")
        producer.produce(topic, b"b")
        producer.flush(30)
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.produce(topic, b"c")
        producer.commit_transaction(30)
        plain = t.producer()
        plain.produce(topic, b"d")
        plain.flush(30)
        return read(t, topic, "read_committed"), read(t, topic, "read_uncommitted")
    committed, uncommitted = peers.same(scenario)
    assert [v for _, v in committed] == [b"c", b"d"]
    assert [v for _, v in uncommitted] == [b"a", b"b", b"c", b"d"]


def test_an_open_transaction_holds_the_last_stable_offset(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("lso")
        plain = t.producer()
        plain.produce(topic, b"before")
        plain.flush(30)
        producer = txn_producer(t)
        producer.begin_transaction()
        producer.produce(topic, b"open")
        producer.flush(30)
        plain.produce(topic, b"after")
        plain.flush(30)
        with t.wire() as client:
            during = (list_offset(client, topic, -1, READ_COMMITTED)[:2],
                      list_offset(client, topic, -1, READ_UNCOMMITTED)[:2])
            seen_during = read(t, topic, "read_committed", quiet_s=1.5)
            producer.commit_transaction(30)
            # Kafka writes the commit markers after answering EndTxn: wait for the partition to settle
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                after = (list_offset(client, topic, -1, READ_COMMITTED)[:2],
                         list_offset(client, topic, -1, READ_UNCOMMITTED)[:2])
                if after[0] == after[1]:
                    break
                time.sleep(0.1)
        return during, seen_during, after, read(t, topic, "read_committed")
    during, seen_during, after, seen_after = peers.same(scenario)
    assert during == (("none", 1), ("none", 3)) and seen_during == [(0, b"before")]
    assert after == (("none", 4), ("none", 4))
    assert [v for _, v in seen_after] == [b"before", b"open", b"after"]


def test_a_second_producer_fences_the_first(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("fenced")
        txn_id = t.name_of("fenced-id")
        first = t.producer(**{"transactional.id": txn_id})
        first.init_transactions(30)
        first.begin_transaction()
        first.produce(topic, b"zombie")
        first.flush(30)
        second = t.producer(**{"transactional.id": txn_id})
        second.init_transactions(30)
        second.begin_transaction()
        second.produce(topic, b"live")
        second.commit_transaction(30)
        try:
            first.commit_transaction(30)
            outcome = "committed"
        except KafkaException as exc:
            error = exc.args[0]
            outcome = (error.name(), error.fatal())
        return outcome, read(t, topic, "read_committed")
    outcome, seen = peers.same(scenario)
    assert outcome == ("_FENCED", True) and [v for _, v in seen] == [b"live"]


def test_a_transaction_past_its_timeout_is_aborted(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("timeout")
        producer = txn_producer(t, **{"transaction.timeout.ms": 2000, "message.timeout.ms": 2000})
        producer.begin_transaction()
        producer.produce(topic, b"slow")
        producer.flush(30)
        deadline = time.monotonic() + 60
        with t.wire() as client:
            while time.monotonic() < deadline:
                lso = list_offset(client, topic, -1, READ_COMMITTED)[1]
                hwm = list_offset(client, topic, -1)[1]
                if lso == hwm:
                    break
                time.sleep(0.5)
        try:
            producer.commit_transaction(30)
            outcome = "committed"
        except KafkaException as exc:
            outcome = exc.args[0].name()
        return lso == hwm, hwm, outcome, read(t, topic, "read_committed", quiet_s=1.5)
    aborted, end, outcome, seen = peers.same(scenario)
    assert aborted and end == 2 and seen == [] and outcome != "committed"


def test_transactional_offsets_are_committed_with_the_transaction(peers: Peers) -> None:
    def scenario(t: Target):
        topic = t.topic("txn-offsets", partitions=2)
        group = t.name_of("txn-group")
        producer = txn_producer(t)
        consumer = t.consumer(group)
        outcomes = []
        for commit, offset in ((True, 5), (False, 9)):
            producer.begin_transaction()
            producer.produce(topic, b"out", partition=1)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)],
                                                 consumer.consumer_group_metadata(), 30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
            committed = consumer.committed([TopicPartition(topic, 0)], 30)
            outcomes.append([(c.partition, c.offset) for c in committed])
        consumer.close()
        return outcomes
    assert peers.same(scenario) == [[(0, 5)], [(0, 5)]]


def test_an_empty_transaction_commits(peers: Peers) -> None:
    def scenario(t: Target):
        producer = txn_producer(t)
        producer.begin_transaction()
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.abort_transaction(30)
        return "ok"
    peers.same(scenario)


def test_a_transaction_timeout_above_the_maximum_is_refused(peers: Peers) -> None:
    def scenario(t: Target):
        producer = t.producer(**{"transactional.id": t.name_of("too-long"), "transaction.timeout.ms": 900_001,
                                 "message.timeout.ms": 900_001})
        try:
            producer.init_transactions(30)
            return "accepted"
        except KafkaException as exc:
            return error_name(exc)
    assert peers.same(scenario) == "INVALID_TRANSACTION_TIMEOUT"
