"""The retry queue, as Decaton's: ``<topic>-retry`` carries tasks to process again after a backoff, their
metadata (retry count, scheduled time) in the ``dt_meta`` header, so Java Decaton and strom read each
other's retry topics. strom's extension: after ``strom.retry.max.attempts`` retries a task goes to the dead
letter topic (``<topic>-dlq``) instead."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from confluent_kafka import KafkaError, Producer

from strom.errors import ConfigError
from strom.kafka import clients
from strom.tasks.completion import Completion
from strom.tasks.context import RawHeaders, TaskRequest
from strom.tasks.properties import ProcessorProperties, ProcessorPropertiesView
from strom.tasks.protocol import with_metadata_header

__all__ = ["DLQ_TOPIC_SUFFIX", "RETRY_PRODUCER_CONFIG", "RETRY_TOPIC_SUFFIX", "RetryConfig", "RetryQueue"]

log = logging.getLogger(__name__)

RETRY_TOPIC_SUFFIX = "-retry"
DLQ_TOPIC_SUFFIX = "-dlq"
RETRY_PRODUCER_CONFIG = {"linger.ms": 100}
"""Decaton's preset for the retry producer: failures come in bursts, their latency matters little."""


@dataclass(frozen=True)
class RetryConfig:
    """Decaton's RetryConfig: ``backoff_ms`` is how long a retried task waits (its scheduled time is the time
    of ``retry()`` plus the backoff); ``retry_topic`` defaults to ``<topic>-retry``. ``dlq_topic`` (strom's
    extension) defaults to ``<topic>-dlq``."""

    backoff_ms: int
    retry_topic: str | None = None
    dlq_topic: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.backoff_ms, bool) or not isinstance(self.backoff_ms, int) or self.backoff_ms < 0:
            raise ConfigError(f"RetryConfig backoff_ms must be a non-negative whole number of milliseconds, "
                              f"got {self.backoff_ms!r}.")

    @classmethod
    def with_backoff(cls, backoff_ms: int) -> RetryConfig:
        return cls(backoff_ms)

    def retry_topic_or_default(self, topic: str) -> str:
        return self.retry_topic or topic + RETRY_TOPIC_SUFFIX

    def dlq_topic_or_default(self, topic: str) -> str:
        return self.dlq_topic or topic + DLQ_TOPIC_SUFFIX


class RetryQueue:
    """Produces retried tasks; the original task completes once its retry record is acknowledged."""

    def __init__(self, producer: Producer, topic: str, config: RetryConfig,
                 props: ProcessorPropertiesView) -> None:
        self._producer = producer
        self.retry_topic = config.retry_topic_or_default(topic)
        self.dlq_topic = config.dlq_topic_or_default(topic)
        self._backoff_ms = config.backoff_ms
        self._max_attempts = props.get(ProcessorProperties.RETRY_MAX_ATTEMPTS)

    def send(self, request: TaskRequest, completion: Completion) -> None:
        md = request.metadata
        attempt = md.retry_count + 1
        limit = self._max_attempts.value
        wire = md.to_wire()
        if 0 <= limit < attempt:
            topic = self.dlq_topic
            log.warning("Task %s-%d@%d failed %d attempts; sending it to the dead letter topic %s",
                        md.topic, md.partition, md.offset, attempt, topic)
        else:
            topic = self.retry_topic
            due_ms = int(time.time() * 1000) + self._backoff_ms
            wire = replace(wire, retry_count=attempt, scheduled_time_ms=due_ms)
        self._produce(topic, request, with_metadata_header(request.headers, wire), completion)

    def _produce(self, topic: str, request: TaskRequest, headers: RawHeaders, completion: Completion) -> None:
        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is None:
                completion.complete()
                return
            log.error("Could not store retry of %s in %s (%s); sending it again",
                      request.metadata, topic, err)
            self._produce(topic, request, headers, completion)

        clients.produce(self._producer, topic, request.task_bytes, request.key, headers=headers,
                        on_delivery=delivered)

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        return self._producer.flush(timeout_s)
