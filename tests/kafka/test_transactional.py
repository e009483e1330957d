"""strom.kafka.transactional against a real broker (strom broker and the 3-node Apache Kafka cluster, where
the transaction coordinator and the partition leaders are different brokers): the transaction's happy path,
and its one error policy (fenced: ProducerFencedError; other Kafka errors: BrokerUnavailableError naming
the owner and the call)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from strom.errors import BrokerUnavailableError, ProcessingError, ProducerFencedError
from strom.kafka import clients
from strom.kafka.transactional import CALM_S, Patience, TransactionalProducer, fenced, send_timed_out
from support.kafka import create_topic, read_topic, unique

pytestmark = pytest.mark.broker


def _producer(broker, transactional_id: str) -> TransactionalProducer:
    owner = f"Test writer {transactional_id}"
    producer = TransactionalProducer(broker.bootstrap_servers, transactional_id, owner, timeout_s=30)
    producer.init_transactions()
    return producer


def test_records_and_offsets_commit_together(any_broker):
    bootstrap = any_broker.bootstrap_servers
    topic, group = create_topic(bootstrap, 1, "txn"), unique("txn-group")
    producer = _producer(any_broker, unique("txn"))
    consumer = clients.consumer(bootstrap, group_id=group)
    try:
        producer.begin_transaction()
        assert producer.in_transaction
        producer.producer.produce(topic, b"written")
        group = consumer.consumer_group_metadata()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], group)
        producer.commit_transaction()
        assert not producer.in_transaction
        assert [m.value() for m in read_topic(bootstrap, topic)] == [b"written"]
        assert consumer.committed([TopicPartition(topic, 0)], 10)[0].offset == 1
    finally:
        consumer.close()


def test_an_aborted_transaction_is_never_read_and_abort_without_one_does_nothing(any_broker):
    bootstrap = any_broker.bootstrap_servers
    topic = create_topic(bootstrap, 1, "txn")
    producer = _producer(any_broker, unique("txn"))
    producer.abort_transaction()  # no transaction open: nothing to do
    producer.begin_transaction()
    producer.producer.produce(topic, b"aborted")
    producer.abort_transaction()
    producer.begin_transaction()
    producer.producer.produce(topic, b"committed")
    producer.commit_transaction()
    assert [m.value() for m in read_topic(bootstrap, topic)] == [b"committed"]


def test_a_producer_fenced_by_a_newer_one_raises_producer_fenced_error(any_broker):
    topic = create_topic(any_broker.bootstrap_servers, 1, "txn")
    transactional_id = unique("txn")
    zombie = _producer(any_broker, transactional_id)
    zombie.begin_transaction()
    zombie.producer.produce(topic, b"zombie")
    assert zombie.producer.flush(10) == 0
    _producer(any_broker, transactional_id)  # bumps the epoch
    message = (rf"^Test writer {transactional_id} was fenced in commit_transaction: another producer with "
               rf"transactional.id '{transactional_id}' took over")
    with pytest.raises(ProducerFencedError, match=message):
        zombie.commit_transaction()
    assert not zombie.in_transaction
    assert read_topic(any_broker.bootstrap_servers, topic) == []


def test_other_kafka_errors_name_the_owner_the_call_and_the_broker(broker):
    producer = _producer(broker, unique("txn"))
    consumer = clients.consumer("127.0.0.1:9", group_id=unique("nowhere"))  # nothing listens
    try:
        message = r"^Test writer txn-\w+ failed in committed: .+\. Check the broker at 127\.0\.0\.1:\d+\.$"
        with pytest.raises(BrokerUnavailableError, match=message):
            producer.call(consumer.committed, [TopicPartition("t", 0)], 1)
    finally:
        consumer.close()


def test_a_send_of_a_fenced_producer_fails_fenced_at_the_flush(broker):
    """A stream thread learns it was fenced from the flush before its commit: librdkafka's fatal error
    (raised while a delivery callback runs) is a ProducerFencedError, not a failure of the application;
    ``fenced`` recognises it also where a task wrapped it."""
    topic = create_topic(broker.bootstrap_servers, 1, "txn")
    transactional_id = unique("txn")
    zombie = TransactionalProducer(broker.bootstrap_servers, transactional_id, "Test writer",
                                   on_delivery=lambda error, message: None)
    zombie.init_transactions()
    zombie.begin_transaction()
    _producer(broker, transactional_id)  # bumps the epoch
    zombie.producer.produce(topic, b"zombie")
    with pytest.raises(ProducerFencedError, match="was fenced in flush") as raised:
        zombie.flush(10)
    wrapped = ProcessingError("a task's send failed")
    assert not fenced(wrapped)
    wrapped.__cause__ = raised.value.__cause__  # librdkafka's KafkaException(_FENCED)
    assert fenced(wrapped)
    with pytest.raises(KafkaException) as fatal:  # produce names the fence only _FATAL
        zombie.producer.produce(topic, b"again")
    assert fatal.value.args[0].code() == KafkaError._FATAL
    wrapped.__cause__ = fatal.value
    assert not fenced(wrapped) and fenced(wrapped, zombie)
    assert read_topic(broker.bootstrap_servers, topic) == []


def test_a_commit_is_bounded_well_below_the_transaction_timeout(broker):
    default = TransactionalProducer(broker.bootstrap_servers, unique("txn"), "Test writer")
    short = TransactionalProducer(broker.bootstrap_servers, unique("txn"), "Test writer",
                                  **{"transaction.timeout.ms": 9000})
    assert (default.commit_timeout_s, short.commit_timeout_s) == (20.0, 3.0)
    assert (default.send_offsets_timeout_s, short.send_offsets_timeout_s) == (5.0, 3.0)


def test_a_patient_producer_waits_its_commit_timeout_before_it_counts_as_stalled(broker):
    """A micro-batch task's producer: a stall fails its Spark task (in local mode, the query), so a
    send-offsets slowed by a loaded host must not count as one after a stream thread's 5 s."""
    patient = TransactionalProducer(broker.bootstrap_servers, unique("txn"), "Test writer", patient=True)
    patient.offsets_sent = True
    assert patient.send_offsets_timeout_s == patient.commit_timeout_s == 20.0


def test_send_offsets_is_bounded_shorter_once_the_producer_found_the_coordinators(broker):
    """librdkafka's stall waits on a coordinator the producer already knows: its later calls get 2 s."""
    topic, group = create_topic(broker.bootstrap_servers, 1, "txn"), unique("txn-group")
    producer = _producer(broker, unique("txn"))
    consumer = clients.consumer(broker.bootstrap_servers, group)
    try:
        for expected in (5.0, 2.0):
            assert producer.send_offsets_timeout_s == expected
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)],
                                                 consumer.consumer_group_metadata())
            producer.commit_transaction()
        assert producer.send_offsets_timeout_s == 2.0
    finally:
        consumer.close()


def test_patience_doubles_the_bounds_at_each_give_up_and_halves_them_after_each_calm_period():
    now = [0.0]
    patience = Patience(clock=lambda: now[0])
    assert patience.bound(2.0) == 2.0
    patience.gave_up()
    patience.gave_up()
    assert patience.bound(2.0) == 8.0
    now[0] += CALM_S - 1
    assert patience.bound(2.0) == 8.0
    now[0] += 1
    assert patience.bound(2.0) == 4.0
    patience.gave_up()  # from the level reached, not the one before the calm period
    assert patience.bound(2.0) == 8.0
    for _ in range(10):
        patience.gave_up()
    assert patience.bound(2.0) == 32.0
    now[0] += 10 * CALM_S
    assert patience.bound(2.0) == 2.0


def test_a_producers_send_offsets_bounds_follow_the_patience_it_shares(broker):
    """The producers of one stream thread slot share its patience: a new one after a give-up waits
    longer, up to the commit timeout."""
    patience = Patience()
    patience.gave_up()
    producer = TransactionalProducer(broker.bootstrap_servers, unique("txn"), "Test writer",
                                     patience=patience)
    assert producer.send_offsets_timeout_s == 10.0
    producer.offsets_sent = True
    assert producer.send_offsets_timeout_s == 4.0
    for _ in range(3):
        patience.gave_up()
    assert producer.send_offsets_timeout_s == producer.commit_timeout_s == 20.0


def test_a_send_timed_out_is_told_apart_from_other_send_errors():
    """A record's delivery that ran out of time (a leader unreachable or moving) aborts the thread's
    transaction and its tasks are done again (as Kafka Streams' TaskCorruptedException), however deep
    in the task's errors it sits; any other send error stays a failure."""
    def raised(error: KafkaError) -> ProcessingError:
        try:
            try:
                raise KafkaException(error)
            except KafkaException as sent:
                raise ProcessingError("Task 0_1 failed to send a record") from sent
        except ProcessingError as wrapped:
            return wrapped

    assert send_timed_out(raised(KafkaError(KafkaError._MSG_TIMED_OUT)))
    assert not send_timed_out(raised(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)))
    assert not send_timed_out(ValueError("a processor raised"))
