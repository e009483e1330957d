"""Produce (producer ids, epochs and sequences are checked by the partition's producer state)."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from strom.broker.handlers import RequestContext, handles
from strom.broker.log.partition import RecordTooLargeError
from strom.broker.log.records import (
    DECOMPRESSED_LIMIT_FACTOR,
    BatchHeader,
    CorruptBatchError,
    InvalidBatchError,
    iter_records,
    split_batches,
)
from strom.broker.produce_response import PartitionResult, encode
from strom.broker.producer_state import AppendRejectedError
from strom.broker.protocol import EncodedResponse
from strom.broker.security.acls import Operation, ResourceType
from strom.broker.transactions.coordinator import CoordinatorError

log = logging.getLogger(__name__)

PRODUCE = 0


@handles(PRODUCE, 3, 9)
async def produce(ctx: RequestContext, body: Any) -> EncodedResponse | None:
    txn_id = body.transactional_id
    txn_denied = txn_id is not None and not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                          txn_id)
    topics = []
    for topic_data in body.topic_data:
        refusal = (ErrorCode.transactional_id_authorization_failed if txn_denied else
                   None if ctx.authorize(Operation.WRITE, ResourceType.TOPIC, topic_data.name) else
                   ErrorCode.topic_authorization_failed)
        topics.append((topic_data.name, [
            PartitionResult(data.index, refusal.value) if refusal is not None else
            _append(ctx, txn_id, topic_data.name, data.index, data.records)
            for data in topic_data.partition_data]))
    if body.acks == 0:
        return None
    return EncodedResponse([encode(ctx.api_version, ctx.correlation_id, topics)])


def _verify_transactional(ctx: RequestContext, transactional_id: str | None, topic: str, index: int,
                          batches: list[tuple[BatchHeader, memoryview]]) -> None:
    coordinator = ctx.broker.transactions.coordinator
    for header, _ in batches:
        if header.is_transactional:
            try:
                coordinator.verify_produce(transactional_id, header.producer_id, header.producer_epoch,
                                           (topic, index))
            except CoordinatorError as exc:
                raise AppendRejectedError(exc.error_code, str(exc)) from exc


def _keyless_records(batches: list[tuple[BatchHeader, memoryview]],
                     partition_name: str) -> tuple[tuple[int, str], ...]:
    """Kafka's per-record errors for records without a key in the first batch holding any: a
    compacted topic keeps the latest record per key, so a record without one has no place in it."""
    message = f"Compacted topic cannot accept message without key in topic partition {partition_name}"
    for _, batch in batches:
        errors = tuple((i, message) for i, record in enumerate(iter_records(batch)) if record.key is None)
        if errors:
            return errors
    return ()


def _record_errors_message(errors: tuple[tuple[int, str], ...]) -> str:
    """The top-level message Kafka gives a batch rejected for per-record errors."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return (f"One or more records have been rejected due to {len(errors)} record errors in total, "
            f"and only showing the first three errors at most: [{shown}]")


def _append(ctx: RequestContext, transactional_id: str | None, topic: str, index: int,
            records: memoryview | None) -> PartitionResult:
    partition = ctx.broker.logs.partition(topic, index)
    if partition is None:
        return PartitionResult(index, ErrorCode.unknown_topic_or_partition.value)
    if ctx.broker.logs.topics[topic].internal:
        return PartitionResult(index, ErrorCode.invalid_topic_exception.value,
                               error_message=f"clients cannot write to the internal topic {topic}")
    try:
        limit = partition.config["max.message.bytes"] * DECOMPRESSED_LIMIT_FACTOR
        batches = split_batches(records or b"", limit)
        if not batches:
            raise CorruptBatchError("the produce request carries no record batch")
        if any(header.is_control for header, _ in batches):
            raise AppendRejectedError(ErrorCode.invalid_record.value,
                                      "clients cannot write control batches (transaction markers)")
        if "compact" in partition.config["cleanup.policy"]:
            keyless = _keyless_records(batches, f"{topic}-{index}")
            if keyless:
                return PartitionResult(index, ErrorCode.invalid_record.value,
                                       error_message=_record_errors_message(keyless),
                                       record_errors=keyless)
        _verify_transactional(ctx, transactional_id, topic, index, batches)
        appended = partition.append(batches)
    except CorruptBatchError as exc:
        log.warning("rejected produce to %s-%d from client %r: %s", topic, index, ctx.client_id, exc)
        code = ErrorCode.invalid_record if isinstance(exc, InvalidBatchError) else ErrorCode.corrupt_message
        return PartitionResult(index, code.value, error_message=str(exc))
    except RecordTooLargeError as exc:
        return PartitionResult(index, ErrorCode.message_too_large.value, error_message=str(exc))
    except AppendRejectedError as exc:
        return PartitionResult(index, exc.error_code, error_message=str(exc))
    except OSError as exc:  # logged by the partition, once until a write succeeds
        return PartitionResult(index, ErrorCode.kafka_storage_error.value, error_message=str(exc))
    return PartitionResult(index, ErrorCode.none.value, appended.base_offset, appended.log_append_time,
                           partition.log_start_offset)
