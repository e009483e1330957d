"""Idempotent producers and transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn, and for operators DescribeProducers, DescribeTransactions, ListTransactions
and WriteTxnMarkers (kafka-transactions' abort of a hanging transaction)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.broker.handlers import RequestContext, handles, ms
from strom.broker.producer_state import AppendRejectedError
from strom.broker.security.acls import Operation, ResourceType
from strom.broker.transactions.coordinator import PRODUCER_FENCED, CoordinatorError
from strom.broker.transactions.metadata import TxnState
from strom.broker.transactions.offsets import PendingOffset

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
WRITE_TXN_MARKERS = 27
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66

# Versions before these answer INVALID_PRODUCER_EPOCH where newer ones answer PRODUCER_FENCED (KIP-588).
_FENCED_SINCE = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS_TO_TXN: 2, ADD_OFFSETS_TO_TXN: 2, END_TXN: 2,
                 TXN_OFFSET_COMMIT: 3}


def _code(ctx: RequestContext, api_key: int, error: CoordinatorError) -> ErrorCode:
    if error.error_code == PRODUCER_FENCED and ctx.api_version < _FENCED_SINCE[api_key]:
        return ErrorCode.invalid_producer_epoch
    return ErrorCode(error.error_code)


@handles(INIT_PRODUCER_ID, 0, 4)
async def init_producer_id(ctx: RequestContext, body: Any) -> dict[str, Any]:
    coordinator = ctx.broker.transactions.coordinator
    refusal = (_txn_refusal(ctx, body.transactional_id) if body.transactional_id is not None else
               None if ctx.authorize_cluster(Operation.IDEMPOTENT_WRITE)
               or ctx.authorize_any(Operation.WRITE, ResourceType.TOPIC)
               else ErrorCode.cluster_authorization_failed)
    if refusal is not None:
        return {"error_code": refusal, "producer_id": -1, "producer_epoch": -1}
    try:
        pid, epoch = await coordinator.init_producer_id(
            body.transactional_id, ms(body.transaction_timeout),
            getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1))
    except CoordinatorError as exc:
        return {"error_code": _code(ctx, INIT_PRODUCER_ID, exc), "producer_id": -1, "producer_epoch": -1}
    return {"error_code": ErrorCode.none, "producer_id": pid, "producer_epoch": epoch}


@handles(ADD_PARTITIONS_TO_TXN, 0, 3)
async def add_partitions_to_txn(ctx: RequestContext, body: Any) -> dict[str, Any]:
    wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    refusal = _txn_refusal(ctx, body.v3_and_below_transactional_id)
    unwritable = {t.name for t in body.v3_and_below_topics
                  if not ctx.authorize(Operation.WRITE, ResourceType.TOPIC, t.name)}
    if refusal is not None:
        errors = dict.fromkeys(wanted, refusal)
    elif unwritable:  # as Kafka: the denied topics say so, the others were not attempted
        errors = {(t, p): ErrorCode.topic_authorization_failed if t in unwritable else
                  ErrorCode.operation_not_attempted for t, p in wanted}
    else:
        try:
            errors = await ctx.broker.transactions.coordinator.add_partitions(
                body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch, wanted)
        except CoordinatorError as exc:
            errors = dict.fromkeys(wanted, _code(ctx, ADD_PARTITIONS_TO_TXN, exc))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return {"results_by_topic_v3_and_below": [{"name": t, "results_by_partition": r}
                                              for t, r in by_topic.items()]}


@handles(ADD_OFFSETS_TO_TXN, 0, 3)
async def add_offsets_to_txn(ctx: RequestContext, body: Any) -> dict[str, Any]:
    refusal = _txn_refusal(ctx, body.transactional_id) or _group_refusal(ctx, body.group_id)
    if refusal is not None:
        return {"error_code": refusal}
    try:
        await ctx.broker.transactions.coordinator.add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id)
    except CoordinatorError as exc:
        return {"error_code": _code(ctx, ADD_OFFSETS_TO_TXN, exc)}
    return {"error_code": ErrorCode.none}


@handles(TXN_OFFSET_COMMIT, 0, 3)
async def txn_offset_commit(ctx: RequestContext, body: Any) -> dict[str, Any]:
    error = (_txn_refusal(ctx, body.transactional_id) or _group_refusal(ctx, body.group_id)
             or _check_txn_offset_commit(ctx, body))
    unreadable = {t.name for t in body.topics
                  if not ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name)}
    if error == ErrorCode.none:
        offsets = {(t.name, p.partition_index): PendingOffset(p.committed_offset,
                                                              getattr(p, "committed_leader_epoch", -1),
                                                              p.committed_metadata)
                   for t in body.topics for p in t.partitions if t.name not in unreadable}
        ctx.broker.transactions.pending_offsets.add(body.producer_id, body.group_id, offsets)
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index,
         "error_code": ErrorCode.topic_authorization_failed
         if error == ErrorCode.none and t.name in unreadable else error}
        for p in t.partitions]} for t in body.topics]}


def _txn_refusal(ctx: RequestContext, transactional_id: str) -> ErrorCode | None:
    if ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return None
    return ErrorCode.transactional_id_authorization_failed


def _group_refusal(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    if ctx.authorize(Operation.READ, ResourceType.GROUP, group_id):
        return None
    return ErrorCode.group_authorization_failed


def _check_txn_offset_commit(ctx: RequestContext, body: Any) -> ErrorCode:
    """The producer must own the open transaction (fencing by transactional.id) and, as KIP-447 asks,
    the group generation and member must be current (fencing by consumer group metadata)."""
    try:
        ctx.broker.transactions.coordinator.check_offset_commit(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id)
    except CoordinatorError as exc:
        return _code(ctx, TXN_OFFSET_COMMIT, exc)
    return ctx.broker.groups.check_commit(body.group_id, getattr(body, "generation_id", -1),
                                          getattr(body, "member_id", ""),
                                          getattr(body, "group_instance_id", None), transactional=True)


@handles(END_TXN, 0, 3)
async def end_txn(ctx: RequestContext, body: Any) -> dict[str, Any]:
    refusal = _txn_refusal(ctx, body.transactional_id)
    if refusal is not None:
        return {"error_code": refusal}
    try:
        await ctx.broker.transactions.coordinator.end_txn(
            body.transactional_id, body.producer_id, body.producer_epoch, body.committed)
    except CoordinatorError as exc:
        return {"error_code": _code(ctx, END_TXN, exc)}
    return {"error_code": ErrorCode.none}


@handles(DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, body: Any) -> dict[str, Any]:
    """Start time 0 (not Kafka's -1) when no transaction is open: kio cannot read negative times."""
    coordinator = ctx.broker.transactions.coordinator
    states = []
    for txn_id in body.transactional_ids:
        allowed = ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id)
        txn = coordinator.describe(txn_id) if allowed else None
        if txn is None:
            code = (ErrorCode.transactional_id_not_found if allowed
                    else ErrorCode.transactional_id_authorization_failed)
            states.append({"error_code": code, "transactional_id": txn_id,
                           "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": 0,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic, report=False):  # left out (Kafka)
                by_topic.setdefault(topic, []).append(partition)
        states.append({"error_code": ErrorCode.none, "transactional_id": txn_id,
                       "transaction_state": txn.state.wire_name, "transaction_timeout": txn.timeout_ms,
                       "transaction_start_time": max(txn.start_ms, 0), "producer_id": txn.producer_id,
                       "producer_epoch": txn.producer_epoch,
                       "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()]})
    return {"transaction_states": states}


@handles(LIST_TRANSACTIONS, 0, 1)
async def list_transactions(ctx: RequestContext, body: Any) -> dict[str, Any]:
    states = [TxnState.from_wire_name(name) for name in body.state_filters]
    unknown = [name for name, state in zip(body.state_filters, states, strict=True) if state is None]
    found = ctx.broker.transactions.coordinator.list_transactions(
        [s for s in states if s is not None], body.producer_id_filters, getattr(body, "duration_filter", -1))
    if unknown and len(unknown) == len(states):
        found = []  # only unknown states were asked for: nothing matches
    found = [t for t in found if ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                               t.transactional_id, report=False)]
    return {"error_code": ErrorCode.none, "unknown_state_filters": unknown,
            "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                    "transaction_state": t.state.wire_name} for t in found]}


@handles(DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, body: Any) -> dict[str, Any]:
    topics = []
    for request in body.topics:
        topic = ctx.broker.logs.topics.get(request.name)
        partitions = []
        readable = ctx.authorize(Operation.READ, ResourceType.TOPIC, request.name)
        for index in request.partition_indexes:
            if not readable:
                partitions.append({"partition_index": index, "active_producers": [],
                                   "error_code": ErrorCode.topic_authorization_failed})
                continue
            if topic is None or not 0 <= index < len(topic.partitions):
                partitions.append({"partition_index": index, "active_producers": [],
                                   "error_code": ErrorCode.unknown_topic_or_partition})
                continue
            producers = topic.partitions[index].producer_state.active_producers()
            partitions.append({"partition_index": index, "error_code": ErrorCode.none, "active_producers": [
                {"producer_id": p.producer_id, "producer_epoch": p.epoch, "last_sequence": p.last_seq,
                 "last_timestamp": p.last_timestamp, "coordinator_epoch": p.coordinator_epoch,
                 "current_txn_start_offset": -1 if p.current_txn_first_offset is None
                 else p.current_txn_first_offset} for p in producers]})
        topics.append({"name": request.name, "partitions": partitions})
    return {"topics": topics}


@handles(WRITE_TXN_MARKERS, 1, 2)
async def write_txn_markers(ctx: RequestContext, body: Any) -> dict[str, Any]:
    """Writes the requested markers partition by partition. In Kafka the coordinator sends these to
    partition leaders; here the coordinator writes its own markers, so only operators send this."""
    results = []
    allowed = ctx.authorize_cluster(Operation.CLUSTER_ACTION)
    for marker in body.markers:
        topics = [{"name": topic.name, "partitions": [
            {"partition_index": index, "error_code": await _write_marker(ctx, marker, topic.name, index)
             if allowed else ErrorCode.cluster_authorization_failed}
            for index in topic.partition_indexes]} for topic in marker.topics]
        results.append({"producer_id": marker.producer_id, "topics": topics})
    return {"markers": results}


async def _write_marker(ctx: RequestContext, marker: Any, topic: str, index: int) -> ErrorCode:
    if ctx.broker.logs.partition(topic, index) is None:
        return ErrorCode.unknown_topic_or_partition
    try:
        await ctx.broker.transactions.write_requested_marker(
            topic, index, marker.producer_id, marker.producer_epoch, marker.transaction_result,
            marker.coordinator_epoch)
    except AppendRejectedError as exc:
        return ErrorCode(exc.error_code)
    except OSError:  # logged by the partition
        return ErrorCode.kafka_storage_error
    return ErrorCode.none
