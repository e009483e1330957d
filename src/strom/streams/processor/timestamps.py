"""Timestamp extractors, as Kafka Streams names them: what time a record has for windows, joins and
stream time (``default.timestamp.extractor``, or ``Consumed.with_timestamp_extractor`` per source: a
class name below, a class, or an instance of your own with an ``extract`` method)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol

from strom.errors import ProcessingError

if TYPE_CHECKING:
    from strom.streams.processor.records import ConsumerRecord

__all__ = [
    "FailOnInvalidTimestamp",
    "LogAndSkipOnInvalidTimestamp",
    "TimestampExtractor",
    "UsePartitionTimeOnInvalidTimestamp",
    "WallclockTimestampExtractor",
]

log = logging.getLogger(__name__)


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
