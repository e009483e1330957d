"""Produce (producer ids, epochs and sequences are checked by the partition's producer state)."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from strom.broker.handlers import RequestContext, handles
from strom.broker.log.partition import RecordTooLargeError
from strom.broker.log.records import CorruptBatchError, split_batches
from strom.broker.producer_state import AppendRejectedError

log = logging.getLogger(__name__)

PRODUCE = 0


@handles(PRODUCE, 3, 9)
async def produce(ctx: RequestContext, body: Any) -> dict[str, Any] | None:
    responses = []
    for topic_data in body.topic_data:
        partitions = [_append(ctx, topic_data.name, data.index, data.records)
                      for data in topic_data.partition_data]
        responses.append({"name": topic_data.name, "partition_responses": partitions})
    if body.acks == 0:
        return None
    return {"responses": responses}


def _append(ctx: RequestContext, topic: str, index: int, records: bytes | None) -> dict[str, Any]:
    result: dict[str, Any] = {"index": index, "base_offset": -1, "log_append_time": None,
                              "log_start_offset": -1}
    partition = ctx.broker.logs.partition(topic, index)
    if partition is None:
        return {**result, "error_code": ErrorCode.unknown_topic_or_partition}
    if ctx.broker.logs.topics[topic].internal:
        return {**result, "error_code": ErrorCode.invalid_topic_exception,
                "error_message": f"clients cannot write to the internal topic {topic}"}
    try:
        batches = split_batches(records or b"")
        if not batches:
            raise CorruptBatchError("the produce request carries no record batch")
        if any(header.is_control for header, _ in batches):
            raise AppendRejectedError(ErrorCode.invalid_record.value,
                                      "clients cannot write control batches (transaction markers)")
        appended = partition.append(batches)
    except CorruptBatchError as exc:
        log.warning("rejected produce to %s-%d from %s: %s", topic, index, ctx.client_id, exc)
        return {**result, "error_code": ErrorCode.corrupt_message, "error_message": str(exc)}
    except RecordTooLargeError as exc:
        return {**result, "error_code": ErrorCode.message_too_large, "error_message": str(exc)}
    except AppendRejectedError as exc:
        return {**result, "error_code": ErrorCode(exc.error_code), "error_message": str(exc)}
    return {**result, "error_code": ErrorCode.none, "base_offset": appended.base_offset,
            "log_append_time": appended.log_append_time if appended.log_append_time >= 0 else None,
            "log_start_offset": partition.log_start_offset}
