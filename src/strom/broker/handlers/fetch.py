"""Fetch (with long polling) and ListOffsets.

Fetch reads whole batches as stored and sends them from the segment files with
sendfile(2). read_committed (isolation level 1) reads up to the
partition's last stable offset and lists the aborted transactions in the range; the partition
answers both (`Partition.last_stable_offset`, `Partition.aborted_transactions`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode

from strom.broker.fetch_response import PartitionData, encode
from strom.broker.handlers import RequestContext, handles, ms
from strom.broker.log.partition import OffsetOutOfRangeError
from strom.broker.log.segment import FileRange
from strom.broker.protocol import EncodedResponse
from strom.broker.security.acls import Operation, ResourceType

FETCH, LIST_OFFSETS = 1, 2
READ_COMMITTED = 1
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


@handles(FETCH, 4, 12)
async def fetch(ctx: RequestContext, body: Any) -> EncodedResponse:
    deadline = time.monotonic() + ms(body.max_wait) / 1000
    committed_only = body.isolation_level == READ_COMMITTED
    wanted = _distinct_partitions(body)
    denied = {topic for topic, _ in wanted if not ctx.authorize(Operation.READ, ResourceType.TOPIC, topic)}
    max_bytes = min(body.max_bytes, ctx.broker.config["fetch.max.bytes"])
    while True:
        total, topics = _read_all(ctx, wanted, max_bytes, committed_only, denied)
        remaining = deadline - time.monotonic()
        if total >= body.min_bytes or remaining <= 0 or ctx.broker.closing:
            break
        await _wait_for_data(ctx, wanted, remaining)
    return encode(ctx.api_version, ctx.correlation_id, topics)


def _distinct_partitions(body: Any) -> list[tuple[str, list[Any]]]:
    """The requested partitions, each once (as Kafka keys them by partition), in request order."""
    seen: set[tuple[str, int]] = set()
    topics: dict[str, list[Any]] = {}
    for topic in body.topics:
        for request in topic.partitions:
            if (topic.topic, request.partition) not in seen:
                seen.add((topic.topic, request.partition))
                topics.setdefault(topic.topic, []).append(request)
    return list(topics.items())


def _read_all(ctx: RequestContext, wanted: list[tuple[str, list[Any]]], max_bytes: int,
              committed_only: bool, denied: set[str]) -> tuple[int, list[tuple[str, list[PartitionData]]]]:
    """Reads every requested partition within the response's max_bytes (the first read gets at
    least one batch even if it is larger, as fetch.max.bytes in Kafka); partitions of `denied`
    topics are answered TOPIC_AUTHORIZATION_FAILED."""
    budget = max_bytes
    total = 0
    topics = []
    for topic, requests in wanted:
        partitions = []
        for request in requests:
            if topic in denied:
                partitions.append(PartitionData(request.partition, ErrorCode.topic_authorization_failed.value,
                                                -1, -1, -1, None, b""))
                continue
            data = _read_one(ctx, topic, request, committed_only, budget, at_least_one=not total)
            size = data.records.length if isinstance(data.records, FileRange) else 0
            total += size
            budget = max(budget - size, 0)
            partitions.append(data)
        topics.append((topic, partitions))
    return total, topics


def _read_one(ctx: RequestContext, topic: str, request: Any, committed_only: bool,
              budget: int, at_least_one: bool) -> PartitionData:
    partition = ctx.broker.logs.partition(topic, request.partition)
    if partition is None:
        return PartitionData(request.partition, ErrorCode.unknown_topic_or_partition.value,
                             -1, -1, -1, None, b"")
    max_bytes = min(request.partition_max_bytes, budget) if budget > 0 else 0
    try:
        read = (partition.read(request.fetch_offset, max_bytes, committed_only, at_least_one)
                if max_bytes else None)
    except OffsetOutOfRangeError:
        return PartitionData(request.partition, ErrorCode.offset_out_of_range.value,
                             partition.high_watermark, -1, partition.log_start_offset, None, b"")
    if read is None:
        return PartitionData(request.partition, 0, partition.high_watermark,
                             partition.last_stable_offset(), partition.log_start_offset, None, b"")
    aborted = [(a.producer_id, a.first_offset) for a in read.aborted] if committed_only else None
    return PartitionData(request.partition, 0, read.high_watermark, read.last_stable_offset,
                         read.log_start_offset, aborted, read.records or b"")


async def _wait_for_data(ctx: RequestContext, wanted: list[tuple[str, list[Any]]], timeout: float) -> None:
    """Sleeps until one of the fetched partitions gets data (or the timeout passes)."""
    future = asyncio.get_running_loop().create_future()
    partitions = [p for topic, requests in wanted for r in requests
                  if (p := ctx.broker.logs.partition(topic, r.partition)) is not None]
    for partition in partitions:
        partition.add_waiter(future)
    try:
        await asyncio.wait_for(future, timeout)
    except TimeoutError:
        pass
    finally:
        for partition in partitions:
            partition.remove_waiter(future)


@handles(LIST_OFFSETS, 1, 7)
async def list_offsets(ctx: RequestContext, body: Any) -> dict[str, Any]:
    committed_only = getattr(body, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for topic in body.topics:
        partitions = []
        allowed = ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for request in topic.partitions:
            partitions.append(_list_one(ctx, topic.name, request.partition_index, request.timestamp,
                                        committed_only) if allowed else
                              {"partition_index": request.partition_index, "timestamp": -1, "offset": -1,
                               "error_code": ErrorCode.topic_authorization_failed})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}


def _list_one(ctx: RequestContext, topic: str, index: int, timestamp: int,
              committed_only: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"partition_index": index, "timestamp": -1, "offset": -1, "leader_epoch": 0}
    partition = ctx.broker.logs.partition(topic, index)
    if partition is None:
        return {**result, "error_code": ErrorCode.unknown_topic_or_partition}
    if timestamp == EARLIEST:
        offset = partition.log_start_offset
    elif timestamp == LATEST:
        offset = partition.last_stable_offset() if committed_only else partition.high_watermark
    elif timestamp == MAX_TIMESTAMP:
        offset, found_ts = partition.max_timestamp_offset()
        return {**result, "error_code": ErrorCode.none, "offset": offset, "timestamp": found_ts}
    else:
        found = partition.offset_for_timestamp(timestamp)
        if found is None:
            return {**result, "error_code": ErrorCode.none}
        offset, timestamp = found
        return {**result, "error_code": ErrorCode.none, "offset": offset, "timestamp": timestamp}
    return {**result, "error_code": ErrorCode.none, "offset": offset}
