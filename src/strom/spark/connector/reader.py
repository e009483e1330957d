"""Executor side of the source: reads one topic partition's offset range into Arrow batches.

One Spark input partition is one topic partition's ``[start, end)``; the range is read with a
plain assigned consumer (no group), so Spark's checkpoint alone decides what was consumed.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from confluent_kafka import KafkaError, Message, TopicPartition
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from strom.errors import BrokerUnavailableError, DataLossError
from strom.kafka import clients

__all__ = [
    "ARROW_BATCH_ROWS",
    "POLL_WAIT_S",
    "STALL_TIMEOUT_S",
    "OffsetRange",
    "ReadSettings",
    "read_range",
]

ARROW_BATCH_ROWS = 10_000
# Read as a read stalls without progress this long, the broker is gone or the range is unreadable.
STALL_TIMEOUT_S = 120.0
# How long one wait for the next fetch may block before the loop looks at the position again.
POLL_WAIT_S = 0.1
_HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Records ``start <= offset < end`` of one topic partition: the unit of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class ReadSettings:
    bootstrap_servers: str
    client_config: dict[str, str]
    fail_on_data_loss: bool
    include_headers: bool


def read_range(part: OffsetRange, settings: ReadSettings, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Yields the range as Arrow batches in Spark's Kafka schema; stops at ``end`` or the log end."""
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    consumer = clients.consumer(
        settings.bootstrap_servers,
        **{**settings.client_config,
           "enable.partition.eof": True,
           "auto.offset.reset": "error" if settings.fail_on_data_loss else "earliest"},
    )
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        batches = _RangeBatches(consumer, part, settings,
                                _BatchBuilder(part, arrow_schema, settings.include_headers))
        while True:
            with _gc_paused():
                batch = batches.next_batch()
            if batch is None:
                return
            yield batch
    finally:
        consumer.close()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a batch is consumed and built, only in between.

    ``Message`` objects are tracked by the collector: thousands per batch would otherwise set
    off collections of the worker's whole heap again and again (a third of the reader's CPU).
    By the time it runs again they are freed (reference counting), so it never scans them.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _RangeBatches:
    """The range's records, one Arrow batch per call; a batch's messages live only inside it."""

    def __init__(self, consumer, part: OffsetRange, settings: ReadSettings, builder: _BatchBuilder) -> None:
        self._consumer = consumer
        self._part = part
        self._settings = settings
        self._builder = builder
        self._done = False
        self._last_progress = time.monotonic()

    def next_batch(self) -> pa.RecordBatch | None:
        """The next records below ``end``, or None once the range is complete."""
        part = self._part
        while not self._done:
            messages = _next_messages(self._consumer, part)
            if messages is None:
                return None
            records, self._done = _in_range(messages, part, self._settings)
            if messages:
                self._last_progress = time.monotonic()
            elif time.monotonic() - self._last_progress > STALL_TIMEOUT_S:
                raise BrokerUnavailableError(
                    f"Reading {part.topic}-{part.partition} offsets [{part.start}, {part.end}) made "
                    f"no progress for {STALL_TIMEOUT_S:.0f}s at kafka.bootstrap.servers="
                    f"{self._settings.bootstrap_servers!r}. Check that the broker is running."
                )
            if records:
                return self._builder.build(records)
        return None


def _in_range(messages: list[Message], part: OffsetRange, settings: ReadSettings
              ) -> tuple[list[Message], bool]:
    """The records below ``end`` and whether the range is complete; whole-list operations, as
    a per-message Python loop would cost more than building the Arrow batch."""
    done = False
    errors = any(map(Message.error, messages))
    for message in filter(Message.error, messages) if errors else ():
        if message.error().code() == KafkaError._PARTITION_EOF:
            _check_eof(message.offset(), part, settings)
            done = True
        else:
            _raise_consumer_error(message.error(), part, settings)
    records = [m for m in messages if m.error() is None] if errors else messages
    if records and records[-1].offset() >= part.end - 1:
        done = True
        records = records[:bisect.bisect_left(records, part.end, key=Message.offset)]
    return records, done


def _next_messages(consumer, part: OffsetRange) -> list[Message] | None:
    """What has been fetched already, else waits briefly for the next message or event; None
    once the consumer's position is past the range.

    ``consume(n, timeout)`` alone would wait out the whole timeout whenever fewer than ``n``
    records remain, which costs every short range (a micro-batch) the timeout. The position
    matters when a transaction marker ends the range: it is never delivered, so waiting for a
    record (or the end-of-partition event, which the broker sends after its fetch wait) would
    add half a second or more to every read of a transactionally written topic.
    """
    messages = consumer.consume(num_messages=ARROW_BATCH_ROWS, timeout=0)
    if messages:
        return messages
    if consumer.position([TopicPartition(part.topic, part.partition)])[0].offset >= part.end:
        return None
    message = consumer.poll(POLL_WAIT_S)
    return [] if message is None else [message]


def _check_eof(log_end: int, part: OffsetRange, settings: ReadSettings) -> None:
    if log_end < part.end and settings.fail_on_data_loss:
        raise DataLossError(
            f"{part.topic}-{part.partition} ends at offset {log_end}, but the query planned to read "
            f"up to {part.end}: records were deleted (topic truncated or recreated). Set option "
            "failOnDataLoss=false to skip lost records."
        )


def _raise_consumer_error(error: KafkaError, part: OffsetRange, settings: ReadSettings) -> None:
    if error.code() == KafkaError._AUTO_OFFSET_RESET:
        raise DataLossError(
            f"Offset {part.start} of {part.topic}-{part.partition} is no longer available "
            f"({error.str()}): retention removed records the query had not read yet. Set option "
            "failOnDataLoss=false to continue from the earliest available offset."
        )
    if error.fatal() or not error.retriable():
        raise BrokerUnavailableError(
            f"Reading {part.topic}-{part.partition} failed: {error.str()} "
            f"(kafka.bootstrap.servers={settings.bootstrap_servers!r})."
        )


class _BatchBuilder:
    """Columnar conversion of consumed messages; topic and partition are constant per range."""

    def __init__(self, part: OffsetRange, arrow_schema: pa.Schema, include_headers: bool) -> None:
        self._part = part
        self._schema = arrow_schema
        self._include_headers = include_headers

    def build(self, messages: list[Message]) -> pa.RecordBatch:
        """Column by column: ``map`` over the unbound accessors is the cheapest per-message call."""
        n = len(messages)
        timestamp, timestamp_type = _timestamps(map(Message.timestamp, messages), n)
        columns = [
            pa.array(list(map(Message.key, messages)), pa.binary()),
            pa.array(list(map(Message.value, messages)), pa.binary()),
            pa.repeat(pa.scalar(self._part.topic, pa.string()), n),
            pa.repeat(pa.scalar(self._part.partition, pa.int32()), n),
            _offsets(messages),
            timestamp,
            timestamp_type,
        ]
        if self._include_headers:
            columns.append(pa.array(list(map(Message.headers, messages)), _HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)


def _offsets(messages: list[Message]) -> pa.Array:
    """Offsets rise strictly, so first and last ``n - 1`` apart means every offset in between
    (no aborted records or markers skipped): a range, built without a call per message."""
    first, last = messages[0].offset(), messages[-1].offset()
    if last - first == len(messages) - 1:
        return pa.array(np.arange(first, last + 1, dtype=np.int64))
    return pa.array(np.fromiter(map(Message.offset, messages), np.int64, len(messages)))


def _timestamps(pairs: Iterable[tuple[int, int]], n: int) -> tuple[pa.Array, pa.Array]:
    """librdkafka's (type, ms) pairs → Spark's timestamp (null when absent) and timestampType.

    librdkafka numbers types 0 none, 1 create, 2 log-append; Kafka (and Spark) -1, 0, 1.
    """
    flat = np.fromiter(itertools.chain.from_iterable(pairs), dtype=np.int64, count=2 * n)
    kinds, millis = flat[0::2], flat[1::2]
    timestamp = pa.array(millis * 1000, mask=kinds == 0).cast(pa.timestamp("us", tz="UTC"))
    return timestamp, pa.array((kinds - 1).astype(np.int32))
