"""The exception handlers an application configures, as Kafka Streams' ``org.apache.kafka.streams.errors``
names them, and the responses they give.

``default.deserialization.exception.handler``, ``processing.exception.handler`` and
``default.production.exception.handler`` take a class name below, a class, or an instance of your own
with the same ``handle`` method(s). The errors strom raises are in ``strom.errors``.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from strom.streams.processor.records import ConsumerRecord

__all__ = [
    "DefaultProductionExceptionHandler",
    "DeserializationExceptionHandler",
    "ErrorHandlerContext",
    "HandlerResponse",
    "LogAndContinueExceptionHandler",
    "LogAndContinueProcessingExceptionHandler",
    "LogAndContinueProductionExceptionHandler",
    "LogAndFailExceptionHandler",
    "LogAndFailProcessingExceptionHandler",
    "ProcessingExceptionHandler",
    "ProductionExceptionHandler",
]

log = logging.getLogger(__name__)


class HandlerResponse(enum.Enum):
    CONTINUE = "continue"
    FAIL = "fail"


class DeserializationExceptionHandler(Protocol):
    def handle(self, context: Any, record: ConsumerRecord, exception: Exception) -> HandlerResponse: ...


class ErrorHandlerContext(NamedTuple):
    """Where a processing error happened: the input record's metadata, the node and the task."""

    topic: str | None
    partition: int
    offset: int
    headers: Any
    processor_node_id: str
    task_id: str
    timestamp: int


class ProcessingExceptionHandler(Protocol):
    """Kafka's KIP-1033: decides whether a processor's exception fails the task or skips the record."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResponse: ...


class ProductionExceptionHandler(Protocol):
    def handle(
        self, topic: str, key: bytes | None, value: bytes | None, exception: Exception
    ) -> HandlerResponse: ...

    def handle_serialization_exception(
        self, topic: str, key: Any, value: Any, exception: Exception
    ) -> HandlerResponse: ...


class LogAndContinueExceptionHandler:
    """Skips a record that will not deserialize; the task counts it in ``dropped_records``."""

    def handle(self, context: Any, record: ConsumerRecord, exception: Exception) -> HandlerResponse:
        log.warning(
            "Skipping record %s-%d@%d that could not be deserialized: %s",
            record.topic,
            record.partition,
            record.offset,
            exception,
        )
        return HandlerResponse.CONTINUE


class LogAndFailExceptionHandler:
    """Stops processing at a record that will not deserialize (Kafka Streams' default)."""

    def handle(self, context: Any, record: ConsumerRecord, exception: Exception) -> HandlerResponse:
        log.error(
            "Record %s-%d@%d could not be deserialized: %s",
            record.topic,
            record.partition,
            record.offset,
            exception,
        )
        return HandlerResponse.FAIL


class LogAndFailProcessingExceptionHandler:
    """A processor's exception fails the task (Kafka Streams' default): the error names the record."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResponse:
        return HandlerResponse.FAIL


class LogAndContinueProcessingExceptionHandler:
    """Skips the record at the processor that raised (its other branches still get it); the task counts
    it in ``dropped_records``."""

    def handle(self, context: ErrorHandlerContext, record: Any, exception: Exception) -> HandlerResponse:
        log.warning(
            "Skipping record %s-%s@%s in processor %s of task %s: %s: %s",
            context.topic,
            context.partition,
            context.offset,
            context.processor_node_id,
            context.task_id,
            type(exception).__name__,
            exception,
        )
        return HandlerResponse.CONTINUE


class DefaultProductionExceptionHandler:
    """Fails the task when a record cannot be serialized or sent."""

    def handle(
        self, topic: str, key: bytes | None, value: bytes | None, exception: Exception
    ) -> HandlerResponse:
        return HandlerResponse.FAIL

    def handle_serialization_exception(
        self, topic: str, key: Any, value: Any, exception: Exception
    ) -> HandlerResponse:
        return HandlerResponse.FAIL


class LogAndContinueProductionExceptionHandler:
    """Drops a record that cannot be serialized or sent and keeps going (counted in ``dropped_records``)."""

    def handle(
        self, topic: str, key: bytes | None, value: bytes | None, exception: Exception
    ) -> HandlerResponse:
        log.warning("Dropping a record that could not be sent to %s: %s", topic, exception)
        return HandlerResponse.CONTINUE

    def handle_serialization_exception(
        self, topic: str, key: Any, value: Any, exception: Exception
    ) -> HandlerResponse:
        log.warning("Dropping a record that could not be serialized for %s: %s", topic, exception)
        return HandlerResponse.CONTINUE
