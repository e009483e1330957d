"""The "strom" sink: rows (key, value, topic, partition, headers) become Kafka records.

``delivery.guarantee=exactly_once``: every Spark write task owns a transactional producer whose
``transactional.id`` is derived from the query id and the task's partition. ``init_transactions``
fences any earlier or speculative attempt of the same task; the task then commits its records
together with a *batch marker* (the offset ``batch_id + 1`` of the sink group
``strom-sink-<query>-<partition>``), in one transaction. A replay of a batch that already
committed finds the marker and writes nothing, so each batch reaches Kafka exactly once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, Producer, TopicPartition
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from strom.errors import BrokerUnavailableError, ConfigError, StromError
from strom.kafka import clients
from strom.kafka.clients import CONNECT_AT_ONCE
from strom.kafka.reading import fetch_committed
from strom.kafka.security import refusal
from strom.kafka.transactional import TransactionalProducer
from strom.spark.connector.options import SinkOptions

__all__ = [
    "BATCH_ID_PROPERTY",
    "QUERY_ID_PROPERTY",
    "KafkaBatchWriter",
    "KafkaStreamWriter",
    "SinkCommitMessage",
    "TaskIdentity",
    "check_sink_schema",
    "write_partition",
]

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
_TIMEOUT_S = 60.0


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one write task did: records written, or that its batch had been written before."""

    partition: int
    records: int
    replayed: bool = False


@dataclass(frozen=True)
class TaskIdentity:
    """Names a write task across retries and restarts: same query, partition and batch."""

    query_id: str
    partition: int
    batch_id: int

    @property
    def transactional_id(self) -> str:
        return f"strom-sink-{self.query_id}-{self.partition}"

    @property
    def marker_group(self) -> str:
        return f"strom-sink-{self.query_id}-{self.partition}"


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Rejects columns the sink would drop or misread, before any task runs."""
    header_type = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))
    allowed = {"key": (BinaryType(), StringType()), "value": (BinaryType(), StringType()),
               "topic": (StringType(),), "partition": (IntegerType(),), "headers": None}
    names = schema.fieldNames()
    if "value" not in names:
        raise ConfigError(f"The Kafka sink needs a 'value' column (binary or string); the DataFrame has "
                          f"{names}. Select or alias one, e.g. to_json(struct(*)) AS value.")
    for field in schema.fields:
        if field.name not in allowed:
            raise ConfigError(f"Column {field.name!r} cannot be written to Kafka: the sink takes "
                              f"key, value, topic, partition and headers. Drop it or fold it into value.")
        types = allowed[field.name]
        if field.name == "headers":
            if not _same_headers(field.dataType, header_type):
                raise ConfigError(f"Column 'headers' must be {header_type.simpleString()}, "
                                  f"not {field.dataType.simpleString()}.")
        elif field.dataType not in types:
            raise ConfigError(f"Column {field.name!r} has type {field.dataType.simpleString()}; expected "
                              f"{' or '.join(t.simpleString() for t in types)}. Cast it.")
    if "topic" not in names and options.topic is None:
        raise ConfigError("No topic to write to: set option 'topic' or add a 'topic' column.")


def _same_headers(actual: object, expected: ArrayType) -> bool:
    if not isinstance(actual, ArrayType) or not isinstance(actual.elementType, StructType):
        return False
    fields = actual.elementType.fields
    return [(f.name, f.dataType) for f in fields] == [(f.name, f.dataType)
                                                      for f in expected.elementType.fields]


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("strom")``; the batch id comes from the task's local properties."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self._options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        context = TaskContext.get()
        identity = TaskIdentity(context.getLocalProperty(QUERY_ID_PROPERTY), context.partitionId(),
                                int(context.getLocalProperty(BATCH_ID_PROPERTY)))
        return write_partition(self._options, iterator, identity)

    def commit(self, messages: list[SinkCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"batch {batchId}")


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("strom")``: one job is one batch of a query named by a fresh id, or by
    txnAppId with txnVersion as its batch id (a repeated version is recognised as a replay)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_sink_schema(schema, options)
        self._options = options
        version = options.write_version
        self._job_id = f"batch-{uuid.uuid4()}" if version is None else f"app-{version.app_id}"
        self._batch_id = 0 if version is None else version.version

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        identity = TaskIdentity(self._job_id, TaskContext.get().partitionId(), self._batch_id)
        return write_partition(self._options, iterator, identity)

    def commit(self, messages: list[SinkCommitMessage | None]) -> None:
        _log_commit(messages, self._job_id)


def _log_commit(messages: list[SinkCommitMessage | None], what: str) -> None:
    written = sum(m.records for m in messages if m is not None)
    replayed = sum(1 for m in messages if m is not None and m.replayed)
    log.info("strom sink %s: %d records written, %d tasks recognised a replay", what, written, replayed)


def write_partition(options: SinkOptions, batches: Iterator[pa.RecordBatch], identity: TaskIdentity
                    ) -> SinkCommitMessage:
    """Writes one task's rows with the configured guarantee."""
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return SinkCommitMessage(identity.partition, 0)
    remaining = _chain(first, batches)
    if options.exactly_once:
        marker_topic = options.topic or first.column("topic")[0].as_py()
        return _TransactionalTask(options, identity, marker_topic).run(remaining)
    return _write_at_least_once(options, identity, remaining)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _write_at_least_once(options: SinkOptions, identity: TaskIdentity,
                         batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    # Reports only for failures: a Python callback per record would cost a third of the throughput.
    producer = clients.producer(options.bootstrap_servers, **{**CONNECT_AT_ONCE, **options.client_config},
                                on_delivery=on_delivery, **{"delivery.report.only.error": True})
    records = _produce_all(producer, options, batches)
    remaining = producer.flush(_TIMEOUT_S)
    if errors or remaining:
        cause = errors[0].str() if errors else f"{remaining} records not acknowledged in {_TIMEOUT_S}s"
        raise BrokerUnavailableError(f"Writing to Kafka at {options.bootstrap_servers} failed: {cause}.")
    return SinkCommitMessage(identity.partition, records)


class _TransactionalTask:
    """One write task's transaction: fence, check the batch marker, write, commit with the marker."""

    def __init__(self, options: SinkOptions, identity: TaskIdentity, marker_topic: str) -> None:
        self._options = options
        self._identity = identity
        self._marker = TopicPartition(marker_topic, 0)
        self._producer = TransactionalProducer(
            options.bootstrap_servers, identity.transactional_id,
            f"Exactly-once write of batch {identity.batch_id} by {identity.transactional_id}", _TIMEOUT_S,
            **{**CONNECT_AT_ONCE, **options.client_config})
        self._marker_consumer = clients.consumer(  # read_committed: fetches only stable markers
            options.bootstrap_servers, group_id=identity.marker_group,
            **{**CONNECT_AT_ONCE, **options.client_config, "isolation.level": "read_committed"})

    def run(self, batches: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        try:
            self._producer.init_transactions()
            if self._committed_batches() > self._identity.batch_id:
                log.info("Batch %d of %s was written before; skipping the replay",
                         self._identity.batch_id, self._identity.transactional_id)
                return SinkCommitMessage(self._identity.partition, 0, replayed=True)
            self._producer.begin_transaction()
            try:
                records = _produce_all(self._producer.producer, self._options, batches)
            except StromError:
                self._producer.abort_transaction()
                raise
            marker = TopicPartition(self._marker.topic, 0, self._identity.batch_id + 1)
            group = self._marker_consumer.consumer_group_metadata()
            self._producer.send_offsets_to_transaction([marker], group)
            self._producer.commit_transaction()
            return SinkCommitMessage(self._identity.partition, records)
        finally:
            self._marker_consumer.close()

    def _committed_batches(self) -> int:
        """How many batches this task committed before: the marker offset (0 if none). A refused marker
        group is said at once, naming it (librdkafka's committed() would only time out)."""
        try:
            committed = fetch_committed(self._marker_consumer, [self._marker], _TIMEOUT_S)
        except KafkaException as exc:
            group = self._identity.marker_group
            if (refused := refusal(self._options.client_config, exc.args[0], group=group,
                                   topic=self._marker.topic)) is not None:
                raise refused from None
            raise BrokerUnavailableError(
                f"{self._identity.transactional_id} could not read its batch marker (group {group!r}): "
                f"{exc.args[0].str()}. Check the broker at {self._options.bootstrap_servers}.") from exc
        offset = committed[0].offset
        return 0 if offset == OFFSET_INVALID else offset


def _produce_all(producer: Producer, options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    records = 0
    for batch in batches:
        records += _produce_batch(producer, options.topic, batch)
    return records


def _column(batch: pa.RecordBatch, name: str) -> list:
    index = batch.schema.get_field_index(name)
    return [None] * batch.num_rows if index < 0 else batch.column(index).to_pylist()


def _produce_batch(producer: Producer, default_topic: str | None, batch: pa.RecordBatch) -> int:
    keys, values = _column(batch, "key"), _column(batch, "value")
    names = set(batch.schema.names)
    if default_topic is not None and not names & {"partition", "headers"}:
        produce = producer.produce
        for key, value in zip(keys, values, strict=True):  # the common case, kept tight
            try:
                produce(default_topic, value, key)
            except BufferError:
                clients.produce(producer, default_topic, value, key)
        producer.poll(0)
        return len(keys)
    topics = _column(batch, "topic") if default_topic is None else [default_topic] * len(keys)
    partitions, headers = _column(batch, "partition"), _column(batch, "headers")
    for key, value, topic, partition, header in zip(keys, values, topics, partitions, headers,
                                                      strict=True):
        if topic is None:
            raise ConfigError("A row has a null 'topic' and no option 'topic' is set; fill the "
                              "column or set the option.")
        record_headers = None if header is None else [(h["key"], h["value"]) for h in header]
        clients.produce(producer, topic, value, key, partition=-1 if partition is None else partition,
                        headers=record_headers)
    producer.poll(0)
    return len(keys)

