"""RecordCollector: serializes what a task sends and hands it to a RecordSink (producer or test driver).

The sink is whatever the runtime provides: the Spark runtime wraps a (transactional) producer, the
TopologyTestDriver keeps records in memory. The collector remembers the offset of the last record
delivered per partition, which is what a store's changelog checkpoint records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from strom.errors import ProcessingError, SerializationError
from strom.kafka.security import AuthorizationError
from strom.streams.errors import HandlerResponse, ProductionExceptionHandler
from strom.streams.internals.tuples import new_tuple
from strom.streams.processor.api import Headers
from strom.streams.processor.records import TopicPartition

log = logging.getLogger(__name__)


class RecordSink(Protocol):
    """Where serialized records go. ``partition`` None means the sink's default (murmur2) partitioner.

    A sink reports each delivery with ``collector.delivered(topic, partition, offset)`` and each failure
    with ``collector.send_failed(topic, key, value, exception)``, during ``send`` or ``flush``.
    """

    def send(
        self,
        collector: RecordCollector,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
    ) -> None: ...

    def flush(self, collector: RecordCollector) -> None: ...


class RecordCollector:
    """One per task: serialization, the production exception handler, delivered offsets."""

    def __init__(self, sink: RecordSink, handler: ProductionExceptionHandler, task_id: str) -> None:
        self.sink = sink
        self.handler = handler
        self.task_id = task_id
        self.offsets: dict[TopicPartition, int] = {}
        self.dropped_records = 0
        self.send_error: Exception | None = None
        """The first failure a sink reported; the next send or flush raises it (``check_error``)."""

    def send(
        self,
        topic: str,
        key: Any,
        value: Any,
        timestamp: int,
        headers: Headers,
        key_serialize: Callable[[str, Any], bytes | None],
        value_serialize: Callable[[str, Any], bytes | None],
        partition: int | None = None,
    ) -> None:
        if self.send_error is not None:
            self.check_error()
        try:
            key_bytes = None if key is None else key_serialize(topic, key)
            value_bytes = None if value is None else value_serialize(topic, value)
        except Exception as exc:
            if (
                self.handler.handle_serialization_exception(topic, key, value, exc)
                is HandlerResponse.CONTINUE
            ):
                self.dropped_records += 1
                return
            raise SerializationError(
                f"Task {self.task_id} could not serialize a record for topic {topic!r} (key={key!r}): {exc}. "
                "Check the serdes given to Produced/Materialized or default.key.serde/default.value.serde.",
            ) from exc
        self.sink.send(self, topic, partition, key_bytes, value_bytes, timestamp, headers)

    def send_bytes(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers = (),
    ) -> None:
        """Sends already serialized bytes (changelog records, and what sinks serialized themselves)."""
        if self.send_error is not None:
            self.check_error()
        self.sink.send(self, topic, partition, key, value, timestamp, headers)

    def delivered(self, topic: str, partition: int, offset: int) -> None:
        self.offsets[new_tuple(TopicPartition, (topic, partition))] = offset

    def send_failed(self, topic: str, key: bytes | None, value: bytes | None, exception: Exception) -> None:
        """A missing ACL (``AuthorizationError``) fails the task whatever the handler says, as in Kafka
        Streams (its RecordCollectorImpl counts security exceptions fatal): no record would go out."""
        if isinstance(exception, AuthorizationError):
            if not isinstance(self.send_error, AuthorizationError):
                self.send_error = exception
        elif self.handler.handle(topic, key, value, exception) is HandlerResponse.CONTINUE:
            self.dropped_records += 1
            log.warning(
                "Task %s dropped a record for %s after a send error: %s", self.task_id, topic, exception
            )
        elif self.send_error is None:
            self.send_error = exception

    def flush(self) -> None:
        self.sink.flush(self)
        self.check_error()

    def check_error(self) -> None:
        if self.send_error is not None:
            error, self.send_error = self.send_error, None
            if isinstance(error, AuthorizationError):
                raise AuthorizationError(f"Task {self.task_id} could not send a record: {error}") from error
            raise ProcessingError(
                f"Task {self.task_id} failed to send a record: {error}. Check that the "
                "output topics exist and the broker is reachable, or configure "
                "default.production.exception.handler to drop such records."
            ) from error
