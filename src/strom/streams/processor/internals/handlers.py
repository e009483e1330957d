"""Deserialization, processing and production exception handlers and timestamp extractors, as Kafka
Streams names them.

Configured by ``default.deserialization.exception.handler`` / ``processing.exception.handler`` /
``default.production.exception.handler`` / ``default.timestamp.extractor``: a class name below, a
class, or an instance.
"""

from __future__ import annotations

import enum
import logging
import time
from typing import Any, NamedTuple, Protocol

from strom.errors import ConfigError, ProcessingError
from strom.streams.processor.internals.records import ConsumerRecord

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


class TimestampExtractor(Protocol):
    def extract(self, record: ConsumerRecord, partition_time: int) -> int: ...


class FailOnInvalidTimestamp:
    """The record's own timestamp; a negative one stops processing (Kafka Streams' default)."""

    record_timestamp_when_valid = True

    def extract(self, record: ConsumerRecord, partition_time: int) -> int:
        if record.timestamp < 0:
            raise ProcessingError(
                f"Record {record.topic}-{record.partition}@{record.offset} has invalid timestamp "
                f"{record.timestamp}. Fix the producer, or set default.timestamp.extractor to "
                "'LogAndSkipOnInvalidTimestamp' or 'UsePartitionTimeOnInvalidTimestamp'."
            )
        return record.timestamp


class LogAndSkipOnInvalidTimestamp:
    """The record's own timestamp; a record with a negative one is skipped (returns -1)."""

    record_timestamp_when_valid = True

    def extract(self, record: ConsumerRecord, partition_time: int) -> int:
        if record.timestamp < 0:
            log.warning(
                "Skipping record %s-%d@%d with invalid timestamp %d",
                record.topic,
                record.partition,
                record.offset,
                record.timestamp,
            )
        return record.timestamp


class UsePartitionTimeOnInvalidTimestamp:
    record_timestamp_when_valid = True

    def extract(self, record: ConsumerRecord, partition_time: int) -> int:
        if record.timestamp >= 0:
            return record.timestamp
        if partition_time < 0:
            raise ProcessingError(
                f"Record {record.topic}-{record.partition}@{record.offset} has an invalid "
                "timestamp and the partition has no time yet to use instead."
            )
        return partition_time


class WallclockTimestampExtractor:
    def extract(self, record: ConsumerRecord, partition_time: int) -> int:
        return int(time.time() * 1000)


_NAMED = {
    cls.__name__: cls
    for cls in (
        LogAndContinueExceptionHandler,
        LogAndFailExceptionHandler,
        LogAndContinueProcessingExceptionHandler,
        LogAndFailProcessingExceptionHandler,
        DefaultProductionExceptionHandler,
        LogAndContinueProductionExceptionHandler,
        FailOnInvalidTimestamp,
        LogAndSkipOnInvalidTimestamp,
        UsePartitionTimeOnInvalidTimestamp,
        WallclockTimestampExtractor,
    )
}


def resolve(key: str, value: Any, method: str) -> Any:
    """An instance from a configured class name, class or instance; it must have ``method``."""
    if isinstance(value, str):
        short = value.rsplit(".", 1)[-1].rsplit("$", 1)[-1]
        if short not in _NAMED:
            raise ConfigError.bad_value(
                key,
                value,
                "one of " + ", ".join(sorted(_NAMED)) + " or a class/instance with a " + method + "() method",
            )
        value = _NAMED[short]
    if isinstance(value, type):
        value = value()
    if not callable(getattr(value, method, None)):
        raise ConfigError.bad_value(key, value, f"an object with a {method}() method")
    return value
