"""Transactions with confluent-kafka against the strom broker: isolation, fencing, timeouts, offsets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from kio.schema.errors import ErrorCode

from broker_eos.wire import READ_COMMITTED, READ_UNCOMMITTED, latest_offset
from strom.broker import EmbeddedBroker
from strom.cli.main import cli
from strom.kafka import clients
from strom.kafka.wire import WireClient

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory) -> Iterator[EmbeddedBroker]:
    """Checks for timed-out transactions every 100 ms, so the timeout test is quick."""
    config = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 100}
    with EmbeddedBroker(tmp_path_factory.mktemp("txn-broker"), config=config) as running:
        yield running


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def topic_on(broker: EmbeddedBroker, partitions: int = 1) -> str:
    name = unique("txn")
    clients.create_topics(broker.bootstrap_servers, {name: partitions})
    return name


def txn_producer(broker: EmbeddedBroker, txn_id: str, **overrides):
    producer = clients.producer(broker.bootstrap_servers, **{"transactional.id": txn_id, **overrides})
    producer.init_transactions(10)
    return producer


def read(broker: EmbeddedBroker, topic: str, isolation: str, until: bytes) -> list[bytes]:
    """Values of partition 0 from the start, up to and including the value ``until``."""
    consumer = clients.consumer(broker.bootstrap_servers, unique("reader"), **{"isolation.level": isolation})
    timeout = 15.0
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while until not in values and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    assert until in values, f"{until!r} never arrived ({isolation}); got {values}"
    return values


def test_aborted_records_are_invisible_to_read_committed_only(txn_broker: EmbeddedBroker) -> None:
    topic = topic_on(txn_broker)
    producer = txn_producer(txn_broker, unique("app"))
    producer.begin_transaction()
    producer.produce(topic, b"aborted-1", partition=0)
    producer.produce(topic, b"aborted-2", partition=0)
    producer.flush(10)
    producer.abort_transaction(10)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(10)

    assert read(txn_broker, topic, "read_committed", b"committed") == [b"committed"]
    everything = [b"aborted-1", b"aborted-2", b"committed"]
    assert read(txn_broker, topic, "read_uncommitted", b"committed") == everything


def test_producer_with_an_older_epoch_is_fenced(txn_broker: EmbeddedBroker) -> None:
    topic = topic_on(txn_broker)
    txn_id = unique("app")
    zombie = txn_producer(txn_broker, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic, b"from-zombie", partition=0)
    zombie.flush(10)

    successor = txn_producer(txn_broker, txn_id)  # bumps the epoch, aborts the zombie's transaction
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(10)
    error = info.value.args[0]
    # the broker answered INVALID_PRODUCER_EPOCH / PRODUCER_FENCED, which librdkafka raises as fatal _FENCED
    assert (error.code(), error.fatal()) == (KafkaError._FENCED, True)
    successor.begin_transaction()
    successor.produce(topic, b"from-successor", partition=0)
    successor.commit_transaction(10)

    assert read(txn_broker, topic, "read_committed", b"from-successor") == [b"from-successor"]


def test_hung_transaction_is_aborted_at_its_timeout_and_unblocks_readers(txn_broker: EmbeddedBroker) -> None:
    topic = topic_on(txn_broker)
    hung = txn_producer(txn_broker, unique("hung"), **{"transaction.timeout.ms": 2000})
    hung.begin_transaction()
    hung.produce(topic, b"hung", partition=0)
    hung.flush(10)
    started = time.monotonic()
    other = txn_producer(txn_broker, unique("other"))
    other.begin_transaction()
    other.produce(topic, b"after", partition=0)
    other.commit_transaction(10)

    with WireClient(txn_broker.bootstrap_servers) as client:
        assert latest_offset(client, topic, 0, READ_UNCOMMITTED) == 3  # hung, after, the commit marker
        assert latest_offset(client, topic, 0, READ_COMMITTED) == 0  # the LSO: the hung transaction's start
    values = read(txn_broker, topic, "read_committed", b"after")
    waited = time.monotonic() - started
    assert values == [b"after"]
    assert waited > 1.5, f"read_committed saw data behind an open transaction after {waited:.2f} s"
    with WireClient(txn_broker.bootstrap_servers) as client:
        end = latest_offset(client, topic, 0, READ_UNCOMMITTED)
        assert latest_offset(client, topic, 0, READ_COMMITTED) == end


def test_transactional_offsets_become_visible_at_commit(txn_broker: EmbeddedBroker) -> None:
    topic, group = topic_on(txn_broker), unique("group")
    source = clients.producer(txn_broker.bootstrap_servers)
    for i in range(3):
        source.produce(topic, f"in-{i}".encode(), partition=0)
    source.flush(10)
    consumer = clients.consumer(txn_broker.bootstrap_servers, group)
    consumer.subscribe([topic])
    consumed = []
    deadline = time.monotonic() + 20
    while len(consumed) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            consumed.append(message)
    assert len(consumed) == 3
    producer = txn_producer(txn_broker, unique("app"))
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 3)], consumer.consumer_group_metadata())

    uncommitted = {"isolation.level": "read_uncommitted"}
    observer = clients.consumer(txn_broker.bootstrap_servers, group, **uncommitted)
    assert observer.committed([TopicPartition(topic, 0)], 10)[0].offset < 0  # not before the commit
    stable_observer = clients.consumer(txn_broker.bootstrap_servers, group)  # read_committed: require_stable
    with pytest.raises(KafkaException) as info:  # answered UNSTABLE_OFFSET_COMMIT (retried) until it ends
        stable_observer.committed([TopicPartition(topic, 0)], 2)
    assert info.value.args[0].code() == KafkaError._TIMED_OUT
    producer.commit_transaction(10)
    assert observer.committed([TopicPartition(topic, 0)], 10)[0].offset == 3
    assert stable_observer.committed([TopicPartition(topic, 0)], 10)[0].offset == 3
    for c in (observer, stable_observer, consumer):
        c.close()


def test_transactional_offsets_are_dropped_on_abort(txn_broker: EmbeddedBroker) -> None:
    topic, group = topic_on(txn_broker), unique("group")
    producer = txn_producer(txn_broker, unique("app"))
    consumer = clients.consumer(txn_broker.bootstrap_servers, group)
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata())
    producer.abort_transaction(10)
    assert consumer.committed([TopicPartition(topic, 0)], 10)[0].offset < 0
    consumer.close()


def test_strom_transactions_list_and_describe(txn_broker: EmbeddedBroker) -> None:
    topic, txn_id = topic_on(txn_broker), unique("cli")
    producer = txn_producer(txn_broker, txn_id)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    producer.flush(10)
    runner = CliRunner()
    bootstrap = ["--bootstrap-servers", txn_broker.bootstrap_servers]

    listed = runner.invoke(cli, ["transactions", "list", *bootstrap, "--state", "Ongoing"])
    assert listed.exit_code == 0, listed.output
    assert txn_id in listed.output
    described = runner.invoke(cli, ["transactions", "describe", *bootstrap, txn_id])
    assert described.exit_code == 0, described.output
    assert "Ongoing" in described.output and f"{topic}-0" in described.output
    producer.commit_transaction(10)
    described = runner.invoke(cli, ["transactions", "describe", *bootstrap, txn_id])
    assert "CompleteCommit" in described.output
    missing = runner.invoke(cli, ["transactions", "describe", *bootstrap, "no-such-id"])
    assert missing.exit_code != 0
    assert "no-such-id" in str(missing.exception)


def test_txn_offset_commit_with_a_stale_member_is_refused(txn_broker: EmbeddedBroker) -> None:
    """KIP-447: group metadata fences a zombie whose member left the group."""
    from kio.schema.txn_offset_commit.v3 import request as toc
    from kio.static.primitive import i16, i32, i64

    topic, group, txn_id = topic_on(txn_broker), unique("group"), unique("app")
    producer = txn_producer(txn_broker, txn_id)
    producer.begin_transaction()
    consumer = clients.consumer(txn_broker.bootstrap_servers, group)
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], consumer.consumer_group_metadata())
    consumer.close()
    described = CliRunner().invoke(cli, ["transactions", "describe", "--bootstrap-servers",
                                         txn_broker.bootstrap_servers, txn_id])
    pid, epoch = int(_field(described.output, "producer id")), int(_field(described.output, "producer epoch"))
    with WireClient(txn_broker.bootstrap_servers) as client:
        response = client.send(toc.TxnOffsetCommitRequest(
            transactional_id=txn_id, group_id=group, producer_id=i64(pid), producer_epoch=i16(epoch),
            generation_id=i32(7), member_id="departed-member", group_instance_id=None,
            topics=(toc.TxnOffsetCommitRequestTopic(name=topic, partitions=(
                toc.TxnOffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(2),
                                                    committed_metadata=None),)),)))
    # the group has no members and never had generation 7: Kafka answers ILLEGAL_GENERATION
    assert response.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
    producer.abort_transaction(10)


def _field(output: str, name: str) -> str:
    for line in output.splitlines():
        if line.startswith(name + "  "):
            return line[len(name):].strip()
    raise AssertionError(f"no {name!r} in:\n{output}")


def test_describe_producers_shows_the_open_transaction(txn_broker: EmbeddedBroker) -> None:
    from kio.schema.describe_producers.v0 import request as dp
    from kio.static.primitive import i32

    topic = topic_on(txn_broker)
    producer = txn_producer(txn_broker, unique("app"))
    producer.begin_transaction()
    producer.produce(topic, b"a", partition=0)
    producer.produce(topic, b"b", partition=0)
    producer.flush(10)
    request = dp.DescribeProducersRequest(topics=(dp.TopicRequest(name=topic, partition_indexes=(i32(0),)),))
    with WireClient(txn_broker.bootstrap_servers) as client:
        (active,) = client.send(request).topics[0].partitions[0].active_producers
        assert (active.current_txn_start_offset, active.last_sequence) == (0, 1)
        producer.commit_transaction(10)
        (active,) = client.send(request).topics[0].partitions[0].active_producers
        assert active.current_txn_start_offset == -1


def test_strom_transactions_reports_bad_input(txn_broker: EmbeddedBroker) -> None:
    runner = CliRunner()
    unknown_state = runner.invoke(cli, ["transactions", "list", "--bootstrap-servers",
                                        txn_broker.bootstrap_servers, "--state", "Pending"])
    assert unknown_state.exit_code != 0 and "Pending" in str(unknown_state.exception)
    unreachable = runner.invoke(cli, ["transactions", "list", "--bootstrap-servers", "127.0.0.1:1"])
    assert unreachable.exit_code != 0 and "No broker reachable at 127.0.0.1:1" in str(unreachable.exception)
