"""The retry queue: ``<subscription>-retry`` carries tasks to process again after a backoff,
``<subscription>-dlq`` receives those that used up ``decaton.retry.max.attempts``."""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, Producer

from strom.kafka import clients
from strom.tasks.completion import Completion
from strom.tasks.context import SCHEDULED_MS_HEADER, Headers, TaskRequest
from strom.tasks.properties import ProcessorProperties, ProcessorPropertiesView

log = logging.getLogger(__name__)

RETRY_COUNT_HEADER = "decaton.retry.count"
DUE_MS_HEADER = "decaton.retry.due.ms"
SOURCE_HEADER = "decaton.source"
_OWN_HEADERS = frozenset((RETRY_COUNT_HEADER, DUE_MS_HEADER, SOURCE_HEADER))


def retry_topic(subscription_id: str) -> str:
    return f"{subscription_id}-retry"


def dlq_topic(subscription_id: str) -> str:
    return f"{subscription_id}-dlq"


def retry_count_and_due_ms(headers: Headers) -> tuple[int, int]:
    """(retry count, the time in epoch ms before which the task waits: a retry's due time or a
    DecatonClient's scheduled time, the later of both); (0, 0) for a first delivery, unscheduled."""
    count = due = 0
    for name, value in headers:
        if name == RETRY_COUNT_HEADER and value:
            count = int(value)
        elif name in (DUE_MS_HEADER, SCHEDULED_MS_HEADER) and value:
            due = max(due, int(value))
    return count, due


class RetryQueue:
    """Produces retried tasks; the original task completes once its retry record is acknowledged."""

    def __init__(self, producer: Producer, subscription_id: str, props: ProcessorPropertiesView) -> None:
        self._producer = producer
        self.retry_topic = retry_topic(subscription_id)
        self.dlq_topic = dlq_topic(subscription_id)
        self._backoff = props.get(ProcessorProperties.RETRY_BACKOFF_MS)
        self._max_attempts = props.get(ProcessorProperties.RETRY_MAX_ATTEMPTS)

    def send(self, request: TaskRequest, completion: Completion) -> None:
        md = request.metadata
        attempt = md.retry_count + 1
        source = next((v for n, v in request.headers if n == SOURCE_HEADER), None)
        source = source or f"{md.topic}-{md.partition}@{md.offset}".encode()
        headers = [(n, v) for n, v in request.headers if n not in _OWN_HEADERS]
        headers += [(RETRY_COUNT_HEADER, str(attempt).encode()), (SOURCE_HEADER, source)]
        if attempt > self._max_attempts.value:
            topic = self.dlq_topic
            log.warning("Task %s failed %d attempts; sending it to the dead letter topic %s",
                        source.decode(), attempt, topic)
        else:
            topic = self.retry_topic
            due = int(time.time() * 1000) + self._backoff.value
            headers.append((DUE_MS_HEADER, str(due).encode()))
        self._produce(topic, request, headers, completion)

    def _produce(self, topic: str, request: TaskRequest, headers: Headers, completion: Completion) -> None:
        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is None:
                completion.complete()
                return
            log.error("Could not store retry of %s in %s (%s); sending it again",
                      request.metadata, topic, err)
            self._produce(topic, request, headers, completion)

        clients.produce(self._producer, topic, request.value, request.key, headers=headers,
                        on_delivery=delivered)

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        return self._producer.flush(timeout_s)
