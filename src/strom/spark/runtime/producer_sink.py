"""ProducerSink: the RecordSink of a stream task running on Spark, over a confluent-kafka producer.

Records without a partition use the murmur2 partitioner, as Kafka's Java clients (and so Kafka
Streams) do: a key lands on the same partition whichever client wrote it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from strom.errors import UnknownTopicError
from strom.kafka import clients
from strom.kafka.transactional import TransactionalProducer
from strom.streams.processor.api import Headers
from strom.streams.processor.internals.collector import RecordCollector

__all__ = ["FLUSH_TIMEOUT_S", "ProducerSink"]

_POLL_EVERY = 1000
FLUSH_TIMEOUT_S = 60.0


class ProducerSink:
    """Sends a task's records; reports deliveries and failures to the task's collector."""

    def __init__(self, bootstrap_servers: str, config: dict[str, Any], transactional_id: str | None = None,
                 owner: str = "") -> None:
        """With ``transactional_id``, ``transactions`` is the producer's transactional side (``owner``
        names it in errors); without, an idempotent producer and ``transactions`` is None."""
        self._collector: RecordCollector | None = None
        settings = {**clients.JAVA_PARTITIONER, **config, "on_delivery": self._on_delivery}
        self.transactions: TransactionalProducer | None = None
        if transactional_id is None:
            self.producer: Producer = clients.producer(bootstrap_servers, **settings)
        else:
            self.transactions = TransactionalProducer(bootstrap_servers, transactional_id, owner, **settings)
            self.producer = self.transactions.producer
        self.sent: Counter[str] = Counter()
        self._unpolled = 0
        self._partition_counts: dict[str, int] = {}

    def send(self, collector: RecordCollector, topic: str, partition: int | None, key: bytes | None,
             value: bytes | None, timestamp: int, headers: Headers) -> None:
        self._collector = collector
        kwargs: dict[str, Any] = {"timestamp": timestamp}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = list(headers)
        clients.produce(self.producer, topic, value, key, **kwargs)
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
        self._collector = collector
        remaining = self.producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            collector.send_failed("(unknown)", None, None, KafkaException(KafkaError(
                KafkaError._TIMED_OUT, f"{remaining} records not acknowledged in {FLUSH_TIMEOUT_S:.0f}s")))

    def close(self) -> None:
        """Drops the producer (it holds this sink's callback, so the cycle is broken explicitly)."""
        self.producer = None  # type: ignore[assignment]

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        collector = self._collector
        if collector is None:
            return
        if error is None:
            collector.delivered(message.topic(), message.partition(), message.offset())
        else:
            collector.send_failed(message.topic(), message.key(), message.value(), KafkaException(error))
