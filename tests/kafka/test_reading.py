"""strom.kafka.reading against a real broker: every partition read to its end and no further, the end
under read_committed is the last stable offset, and a read that cannot progress fails instead of hanging."""

from __future__ import annotations

import gc
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from strom.errors import BrokerUnavailableError, UnknownTopicError
from strom.kafka import clients
from strom.kafka.reading import (
    YOUNG_COLLECTION_OBJECTS,
    committed_offsets,
    end_consumer,
    end_offset,
    partitions_of,
    read_batches,
    read_to_end,
)
from support.kafka import Record, create_topic, produce

pytestmark = pytest.mark.broker


def _values(consumer, topic: str, starts: dict[int, int]) -> list[tuple[int, bytes]]:
    return [(m.partition(), m.value())
            for m in read_to_end(consumer, [TopicPartition(topic, p, o) for p, o in starts.items()])]


def test_every_partition_is_read_from_its_start_to_its_end(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 3, "reading")
    produce(bootstrap, topic, [Record(None, f"{p}-{i}", p) for p in (0, 1) for i in range(3)])  # 2: empty
    consumer = end_consumer(bootstrap)
    try:
        assert partitions_of(consumer, topic) == [0, 1, 2]
        assert [end_offset(consumer, topic, p) for p in (0, 1, 2)] == [3, 3, 0]
        everything = _values(consumer, topic, dict.fromkeys((0, 1, 2), OFFSET_BEGINNING))
        assert sorted(everything) == [(p, f"{p}-{i}".encode()) for p in (0, 1) for i in range(3)]
        assert _values(consumer, topic, {0: 2, 1: 3}) == [(0, b"0-2")]
        assert consumer.assignment() == []  # unassigned when the read ended
    finally:
        consumer.close()


def test_under_read_committed_the_end_is_the_last_stable_offset(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1, "reading")
    produce(bootstrap, topic, [(None, "committed")])
    open_transaction = clients.producer(bootstrap, **{"transactional.id": f"{topic}-txn"})
    open_transaction.init_transactions(30)
    open_transaction.begin_transaction()
    open_transaction.produce(topic, b"pending")
    assert open_transaction.flush(30) == 0
    consumer = end_consumer(bootstrap)
    try:
        assert _values(consumer, topic, {0: OFFSET_BEGINNING}) == [(0, b"committed")]
        open_transaction.commit_transaction(30)
        assert _values(consumer, topic, {0: 1}) == [(0, b"pending")]
    finally:
        consumer.close()


def test_a_reader_stopped_early_gives_its_partitions_back(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1, "reading")
    produce(bootstrap, topic, [(None, str(i)) for i in range(10)])
    consumer = end_consumer(bootstrap)
    try:
        records = read_to_end(consumer, [TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert next(records).value() == b"0"
        records.close()
        assert consumer.assignment() == []
    finally:
        consumer.close()


def test_an_unknown_topic_is_refused_with_advice(broker):
    consumer = end_consumer(broker.bootstrap_servers, **{"allow.auto.create.topics": False})
    try:
        with pytest.raises(UnknownTopicError, match="does not exist; create it"):
            partitions_of(consumer, "no-such-topic-for-reading")
    finally:
        consumer.close()


def test_a_read_without_progress_fails_naming_what_it_read():
    consumer = end_consumer("127.0.0.1:9")  # nothing listens: no record and no end ever arrive
    try:
        with pytest.raises(BrokerUnavailableError, match=r"^Reading changelog c-0 made no progress for 1s"):
            list(read_to_end(consumer, [TopicPartition("c", 0, OFFSET_BEGINNING)], "changelog c-0",
                             stall_timeout_s=1))
        assert consumer.assignment() == []
    finally:
        consumer.close()


def test_a_read_collects_young_objects_less_often_and_gives_the_thresholds_back(broker):
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 1, "reading")
    produce(bootstrap, topic, [(None, str(i)) for i in range(3)])
    before = gc.get_threshold()
    consumer = end_consumer(bootstrap)
    try:
        batches = read_batches(consumer, [TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert next(batches)[0].value() == b"0"
        assert gc.get_threshold()[0] == max(before[0], YOUNG_COLLECTION_OBJECTS)
        inner = read_to_end(consumer, [TopicPartition(topic, 0, OFFSET_BEGINNING)])
        next(inner)  # a second read at once: the first one's end does not lower the thresholds
        batches.close()
        assert gc.get_threshold()[0] == max(before[0], YOUNG_COLLECTION_OBJECTS)
        inner.close()
        assert gc.get_threshold() == before
    finally:
        consumer.close()


class _CoordinatorMoving:
    """librdkafka's answers while a Kafka cluster loads ``__consumer_offsets`` or fails a coordinator over,
    then ``error`` (None: the committed offsets)."""

    def __init__(self, error: int | None) -> None:
        self.answers = [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, error]

    def committed(self, partitions, timeout):
        code = self.answers.pop(0)
        if code is not None:
            raise KafkaException(KafkaError(code))
        return [TopicPartition(tp.topic, tp.partition, 42) for tp in partitions]


def test_committed_offsets_are_asked_again_while_the_coordinator_moves():
    consumer = _CoordinatorMoving(None)
    assert committed_offsets(consumer, "app", [("t", 0)]) == {("t", 0): 42}
    assert consumer.answers == []


def test_committed_offsets_fail_on_an_error_that_does_not_clear():
    with pytest.raises(BrokerUnavailableError, match=r"group 'app'.*GROUP_AUTHORIZATION"):
        committed_offsets(_CoordinatorMoving(KafkaError.GROUP_AUTHORIZATION_FAILED), "app", [("t", 0)])


def test_a_new_consumer_reads_from_the_beginning_without_librdkafkas_offset_query_timer(broker):
    """A logical offset assigned before the client knows the partition's leader is resolved only when
    librdkafka's 500 ms offset-query timer fires (each restore and each new stream thread paid it);
    ``clients.assign`` asks for the leaders first."""
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 2, "assign-at-once")
    produce(bootstrap, topic, [Record(None, f"{p}", p) for p in (0, 1)])
    waits = []
    for _ in range(3):  # the fastest of three: a loaded machine may delay one, the timer delays all
        consumer = clients.consumer(bootstrap, **{**clients.CONNECT_AT_ONCE, "fetch.wait.max.ms": 10})
        try:
            started = time.monotonic()
            clients.assign(consumer, [TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
            while not consumer.consume(10, 0.01):
                assert time.monotonic() - started < 10, "no record within 10 s"
            waits.append(time.monotonic() - started)
        finally:
            consumer.close()
    assert min(waits) < 0.4, f"first records {min(waits):.2f} s after the assign (the timer is 0.5 s)"
