"""Consumer group APIs (classic protocol): FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from strom.broker.groups.offsets import CommittedOffset
from strom.broker.handlers import RequestContext, authorized_operations, handles, ms
from strom.broker.security.acls import Operation, ResourceType

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 13, 14, 15, 16, 42
OFFSET_DELETE = 47
CLASSIC_GROUP = "classic"
TRANSACTION_KEY = 1  # FindCoordinator's key type of a transactional id


@handles(FIND_COORDINATOR, 0, 4)
async def find_coordinator(ctx: RequestContext, body: Any) -> dict[str, Any]:
    broker = ctx.broker
    listener = ctx.session.listener
    node = {"node_id": broker.node_id, "host": listener.advertised_host, "port": listener.advertised_port,
            "error_code": ErrorCode.none, "error_message": None}
    if ctx.api_version >= 4:
        return {"coordinators": [{"key": key, **node, **_coordinator_refusal(ctx, body.key_type, key)}
                                 for key in body.coordinator_keys or ()]}
    return {**node, **_coordinator_refusal(ctx, getattr(body, "key_type", 0), body.key)}


def _coordinator_refusal(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    """The error fields of a coordinator the client may not know of (DESCRIBE on the group or the
    transactional id), else nothing."""
    if key_type == TRANSACTION_KEY:
        if ctx.authorize(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return {}
        return {"error_code": ErrorCode.transactional_id_authorization_failed, "node_id": -1, "host": "",
                "port": -1, "error_message": f"Not authorized to use transactional id {key}"}
    if ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, key):
        return {}
    return {"error_code": ErrorCode.group_authorization_failed, "node_id": -1, "host": "", "port": -1,
            "error_message": f"Not authorized to access group {key}"}


def _may_read(ctx: RequestContext, group_id: str) -> bool:
    return ctx.authorize(Operation.READ, ResourceType.GROUP, group_id)


@handles(JOIN_GROUP, 0, 7)
async def join_group(ctx: RequestContext, body: Any) -> dict[str, Any]:
    if not _may_read(ctx, body.group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "generation_id": -1,
                "member_id": body.member_id, "leader": "", "members": []}
    session_ms = ms(body.session_timeout)
    rebalance = getattr(body, "rebalance_timeout", None)
    return await ctx.broker.groups.join(
        group_id=body.group_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None), client_id=ctx.client_id,
        client_host=ctx.client_host, session_timeout_ms=session_ms,
        rebalance_timeout_ms=ms(rebalance) if rebalance is not None else session_ms,
        protocol_type=body.protocol_type, protocols=[(p.name, p.metadata) for p in body.protocols],
        require_known_member_id=ctx.api_version >= 4)


@handles(SYNC_GROUP, 0, 5)
async def sync_group(ctx: RequestContext, body: Any) -> dict[str, Any]:
    if not _may_read(ctx, body.group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "assignment": b""}
    assignments = {a.member_id: a.assignment for a in body.assignments}
    return await ctx.broker.groups.sync(body.group_id, body.generation_id, body.member_id, assignments,
                                        getattr(body, "group_instance_id", None))


@handles(HEARTBEAT, 0, 4)
async def heartbeat(ctx: RequestContext, body: Any) -> dict[str, Any]:
    if not _may_read(ctx, body.group_id):
        return {"error_code": ErrorCode.group_authorization_failed}
    return {"error_code": ctx.broker.groups.heartbeat(body.group_id, body.generation_id, body.member_id,
                                                      getattr(body, "group_instance_id", None))}


@handles(LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, body: Any) -> dict[str, Any]:
    groups = ctx.broker.groups
    if not _may_read(ctx, body.group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "members": []}
    if ctx.api_version < 3:
        return {"error_code": groups.leave(body.group_id, body.member_id)}
    members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "error_code": groups.leave(body.group_id, m.member_id, m.group_instance_id)}
               for m in body.members]
    return {"error_code": ErrorCode.none, "members": members}


@handles(OFFSET_COMMIT, 2, 8)
async def offset_commit(ctx: RequestContext, body: Any) -> dict[str, Any]:
    groups = ctx.broker.groups
    error = (groups.check_commit(body.group_id, body.generation_id_or_member_epoch, body.member_id,
                                 getattr(body, "group_instance_id", None))
             if _may_read(ctx, body.group_id) else ErrorCode.group_authorization_failed)
    now = int(time.time() * 1000)
    accepted: dict[tuple[str, int], CommittedOffset] = {}
    topics = []
    for topic in body.topics:
        partitions = []
        readable = ctx.authorize(Operation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            code = error if readable or error is ErrorCode.group_authorization_failed else (
                ErrorCode.topic_authorization_failed)
            if code is ErrorCode.none and ctx.broker.logs.partition(topic.name, p.partition_index) is None:
                code = ErrorCode.unknown_topic_or_partition
            if code is ErrorCode.none:
                accepted[(topic.name, p.partition_index)] = CommittedOffset(
                    p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata or "", now)
            partitions.append({"partition_index": p.partition_index, "error_code": code})
        topics.append({"name": topic.name, "partitions": partitions})
    groups.commit(body.group_id, accepted)
    return {"topics": topics}


@handles(OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, body: Any) -> dict[str, Any]:
    if not ctx.authorize(Operation.DELETE, ResourceType.GROUP, body.group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "topics": []}
    readable = {t.name for t in body.topics if ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name)}
    known = {(t.name, p.partition_index): ctx.broker.logs.partition(t.name, p.partition_index) is not None
             for t in body.topics for p in t.partitions if t.name in readable}
    error, results = ctx.broker.groups.delete_offsets(body.group_id, [k for k, ok in known.items() if ok])
    if error is not ErrorCode.none:
        return {"error_code": error, "topics": []}
    topics: dict[str, list[dict[str, Any]]] = {}
    for t in body.topics:
        if t.name not in readable:
            for p in t.partitions:
                known[(t.name, p.partition_index)] = False
    for (topic, partition), ok in known.items():
        code = (results[(topic, partition)] if ok else ErrorCode.unknown_topic_or_partition
                if topic in readable else ErrorCode.topic_authorization_failed)
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {"error_code": ErrorCode.none,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]}


@handles(OFFSET_FETCH, 1, 8)
async def offset_fetch(ctx: RequestContext, body: Any) -> dict[str, Any]:
    if ctx.api_version >= 8:
        groups = [{"group_id": g.group_id, "error_code": ErrorCode.group_authorization_failed, "topics": []}
                  if not _may_describe(ctx, g.group_id) else
                  {"group_id": g.group_id, "error_code": ErrorCode.none,
                   "topics": _committed(ctx, g.group_id, g.topics, body.require_stable)} for g in body.groups]
        return {"groups": groups}
    if not _may_describe(ctx, body.group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "topics": []}
    stable = getattr(body, "require_stable", False)
    return {"error_code": ErrorCode.none, "topics": _committed(ctx, body.group_id, body.topics, stable)}


def _may_describe(ctx: RequestContext, group_id: str) -> bool:
    return ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id)


def _committed(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool) -> list[dict[str, Any]]:
    committed = ctx.broker.groups.committed(group_id)
    if topics is None:  # every topic: those the client may not describe are left out, as Kafka does
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic, report=False):
                wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in topics}
    result = []
    for name, indexes in wanted.items():
        partitions = []
        if topics is not None and not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name):
            result.append({"name": name, "partitions": [
                {"partition_index": i, "error_code": ErrorCode.topic_authorization_failed,
                 "committed_offset": -1, "committed_leader_epoch": -1, "metadata": ""} for i in indexes]})
            continue
        for index in indexes:
            found = committed.get((name, index))
            # KIP-447: offsets an open transaction is about to commit are not answered yet
            unstable = require_stable and ctx.broker.transactions.pending_offsets.has_pending(
                group_id, {(name, index)})
            partitions.append({
                "partition_index": index,
                "error_code": ErrorCode.unstable_offset_commit if unstable else ErrorCode.none,
                "committed_offset": found.offset if found else -1,
                "committed_leader_epoch": found.leader_epoch if found else -1,
                "metadata": found.metadata if found else "",
            })
        result.append({"name": name, "partitions": partitions})
    return result


@handles(DESCRIBE_GROUPS, 0, 5)
async def describe_groups(ctx: RequestContext, body: Any) -> dict[str, Any]:
    return {"groups": [{**ctx.broker.groups.describe(group_id),
                        "authorized_operations": authorized_operations(
                            ctx, body, "include_authorized_operations", ResourceType.GROUP, group_id)}
                       if _may_describe(ctx, group_id) else
                       {"group_id": group_id, "error_code": ErrorCode.group_authorization_failed,
                        "group_state": "", "protocol_type": "", "protocol_data": "", "members": []}
                       for group_id in body.groups]}


@handles(LIST_GROUPS, 0, 5)
async def list_groups(ctx: RequestContext, body: Any) -> dict[str, Any]:
    states = {s.lower() for s in getattr(body, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(body, "types_filter", ()) or ()}
    if types and CLASSIC_GROUP not in types:  # every group here is a classic (pre-KIP-848) group
        return {"error_code": ErrorCode.none, "groups": []}
    listed = [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value,
               "group_type": CLASSIC_GROUP}
              for g in ctx.broker.groups.groups.values() if not states or g.state.value.lower() in states]
    if not ctx.authorize_cluster(Operation.DESCRIBE):  # then only the groups the client may describe
        listed = [g for g in listed if ctx.authorize(Operation.DESCRIBE, ResourceType.GROUP, g["group_id"],
                                                     report=False)]
    return {"error_code": ErrorCode.none, "groups": listed}


@handles(DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, body: Any) -> dict[str, Any]:
    results = [{"group_id": g, "error_code": ctx.broker.groups.delete_group(g)
                if ctx.authorize(Operation.DELETE, ResourceType.GROUP, g)
                else ErrorCode.group_authorization_failed}
               for g in body.groups_names]
    return {"results": results}
