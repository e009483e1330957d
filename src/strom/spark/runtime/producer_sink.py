"""ProducerSink: the RecordSink of a stream task running on Spark, over a confluent-kafka producer.

A micro-batch task has a producer of its own (``ProducerSink.own``); the tasks of a real-time stream
thread share their thread's: each record carries its task's delivery callback, and the thread
flushes the producer once per commit for all of them.

Records without a partition use the murmur2 partitioner, as Kafka's Java clients (and so Kafka
Streams) do: a key lands on the same partition whichever client wrote it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from strom.errors import UnknownTopicError
from strom.kafka import clients
from strom.kafka.security import identity_of, refusal
from strom.kafka.transactional import TransactionalProducer
from strom.streams.processor.api import Headers
from strom.streams.processor.internals.collector import RecordCollector

__all__ = ["FLUSH_TIMEOUT_S", "ProducerSink"]

_POLL_EVERY = 1000
UNASSIGNED = -1
"""librdkafka's RD_KAFKA_PARTITION_UA: the producer's partitioner picks the partition."""
FLUSH_TIMEOUT_S = 60.0


class ProducerSink:
    """Sends a task's records; reports deliveries and failures to the task's collector."""

    def __init__(self, producer: Producer, transactions: TransactionalProducer | None = None,
                 shared: bool = False) -> None:
        """``producer`` of its own (``own``), or ``shared`` with the other tasks of a stream thread;
        ``transactions``: its transactional side when it is the sink's own and transactional."""
        self._collector: RecordCollector | None = None
        self.producer = producer
        self.transactions = transactions
        self.shared = shared
        """The producer is a stream thread's: the thread flushes it, once for all its tasks."""
        self.sent: Counter[str] = Counter()
        self._delivered: dict[tuple[str, int], int] = {}
        self._unpolled = 0
        self._partition_counts: dict[str, int] = {}
        self._deliver = self._on_delivery  # bound once, not per record

    @classmethod
    def own(cls, bootstrap_servers: str, config: dict[str, Any], transactional_id: str | None = None,
            owner: str = "", patient: bool = False) -> ProducerSink:
        """A sink with a producer of its own: transactional with ``transactional_id`` (``owner`` names it
        in errors; ``patient``: see ``TransactionalProducer``), else idempotent."""
        settings = {**clients.JAVA_PARTITIONER, **config}
        if transactional_id is None:
            return cls(clients.producer(bootstrap_servers, **settings))
        transactions = TransactionalProducer(bootstrap_servers, transactional_id, owner, patient=patient,
                                             **settings)
        return cls(transactions.producer, transactions)

    def use(self, producer: Producer) -> None:
        """Sends through ``producer`` from now on (a parked task taken up by another stream thread)."""
        self.producer = producer

    def send(self, collector: RecordCollector, topic: str, partition: int | None, key: bytes | None,
             value: bytes | None, timestamp: int, headers: Headers) -> None:
        self._collector = collector
        partition = UNASSIGNED if partition is None else partition
        listed = list(headers) if headers else None
        try:  # the producer's own call: clients.produce's wrapper costs a record half as much again
            self.producer.produce(topic, value, key, partition=partition, timestamp=timestamp, headers=listed,
                                  on_delivery=self._deliver)
        except BufferError:
            clients.produce(self.producer, topic, value, key, partition=partition, timestamp=timestamp,
                            headers=listed, on_delivery=self._deliver)
        self.sent[topic] += 1
        self._unpolled += 1
        if self._unpolled >= _POLL_EVERY:
            self._unpolled = 0
            self.producer.poll(0)

    def partition_count(self, topic: str) -> int:
        """The topic's partition count, for a StreamPartitioner (asked once per topic)."""
        count = self._partition_counts.get(topic)
        if count is None:
            meta = self.producer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise UnknownTopicError(f"Output topic {topic!r} does not exist: create it before the "
                                        "application starts.")
            count = self._partition_counts[topic] = len(meta.partitions)
        return count

    def flush(self, collector: RecordCollector) -> None:
        """Waits for this sink's records; a shared producer is flushed by its thread instead, once for
        all its tasks (``collector`` hears of failures through the records' callbacks)."""
        self._collector = collector
        if self.shared:
            return
        remaining = self.producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            collector.send_failed("(unknown)", None, None, KafkaException(KafkaError(
                KafkaError._TIMED_OUT, f"{remaining} records not acknowledged in {FLUSH_TIMEOUT_S:.0f}s")))

    def written(self) -> set[tuple[str, int]]:
        """The partitions its records were delivered to since the last call (a stream thread asks at each
        commit, to see how many produce requests a transaction needs): from the collector's delivered
        offsets, not noted per record."""
        offsets = {} if self._collector is None else self._collector.offsets
        moved = {tp for tp, offset in offsets.items() if self._delivered.get(tp) != offset}
        self._delivered = dict(offsets)
        return moved

    def close(self) -> None:
        """Drops the producer (it holds this sink's callback, so the cycle is broken explicitly)."""
        self.producer = None  # type: ignore[assignment]
        self._deliver = None  # type: ignore[assignment]

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        collector = self._collector
        if collector is None:
            return
        if error is None:
            collector.delivered(message.topic(), message.partition(), message.offset())
        elif error.code() == KafkaError._PURGE_QUEUE and "transactional.id" in identity_of(self.producer):
            # its transaction failed or was aborted (never committed): the next transactional call says why
            self.producer.purged.add(message.topic())
        else:
            failure = KafkaException(error)
            refused = refusal(identity_of(self.producer), error, topic=message.topic(),
                              topic_operation="Write")
            if refused is not None:
                refused.__cause__ = failure
            collector.send_failed(message.topic(), message.key(), message.value(), refused or failure)
