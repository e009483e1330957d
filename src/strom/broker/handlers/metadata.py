"""ApiVersions, Metadata and DescribeCluster: what the broker supports and where things are."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from strom.broker.handlers import REGISTRY, RequestContext, authorized_operations, handles
from strom.broker.handlers.topics import may_create
from strom.broker.log.manager import InvalidTopicError, validate_topic_name
from strom.broker.security.acls import CLUSTER_NAME, Operation, ResourceType

API_VERSIONS, METADATA, DESCRIBE_CLUSTER = 18, 3, 60
TOPICS_PER_TURN = 100  # topics described (or auto-created) between turns of the event loop


def api_versions_response(error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    keys = [{"api_key": h.api_key, "min_version": h.min_version, "max_version": h.max_version}
            for h in sorted(REGISTRY.values(), key=lambda h: h.api_key)]
    return {"error_code": error, "api_keys": keys}


@handles(API_VERSIONS, 0, 3)
async def api_versions(ctx: RequestContext, body: Any) -> dict[str, Any]:
    return api_versions_response()


def _broker(ctx: RequestContext) -> dict[str, Any]:
    listener = ctx.session.listener  # clients are told the address of the listener they came through
    return {"node_id": ctx.broker.node_id, "broker_id": ctx.broker.node_id, "host": listener.advertised_host,
            "port": listener.advertised_port, "rack": None}


@handles(METADATA, 0, 12)
async def metadata(ctx: RequestContext, body: Any) -> dict[str, Any]:
    broker = ctx.broker
    requested = getattr(body, "topics", None)
    if requested is None or (ctx.api_version == 0 and not requested):  # all: those the client may describe
        names = [n for n in sorted(broker.logs.topics)
                 if ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, n, report=False)]
    else:
        names = [t if isinstance(t, str) else t.name for t in requested]
    auto_create = getattr(body, "allow_auto_topic_creation", True)
    topics = []
    for i, name in enumerate(n for n in names if n is not None):
        topic_operations = authorized_operations(ctx, body, "include_topic_authorized_operations",
                                                 ResourceType.TOPIC, name)
        topics.append(_topic_metadata(ctx, name, auto_create, topic_operations))
        if i % TOPICS_PER_TURN == TOPICS_PER_TURN - 1:
            await asyncio.sleep(0)  # a request naming thousands of topics lets others be served
    return {"brokers": [_broker(ctx)], "cluster_id": broker.cluster_id, "controller_id": broker.node_id,
            "topics": topics, "cluster_authorized_operations": authorized_operations(
                ctx, body, "include_cluster_authorized_operations", ResourceType.CLUSTER, CLUSTER_NAME)}


def _topic_metadata(ctx: RequestContext, name: str, auto_create: bool, operations: int) -> dict[str, Any]:
    broker = ctx.broker
    if not ctx.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name):
        return {"error_code": ErrorCode.topic_authorization_failed, "name": name, "partitions": []}
    topic = broker.logs.topics.get(name)
    if topic is None:
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            return {"error_code": ErrorCode.invalid_topic_exception, "name": name, "partitions": []}
        if auto_create and broker.config["auto.create.topics.enable"] and not may_create(ctx, name):
            return {"error_code": ErrorCode.topic_authorization_failed, "name": name, "partitions": []}
        topic = broker.auto_create(name) if auto_create else None
        if topic is None:
            return {"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "partitions": []}
    node = broker.node_id
    partitions = [{"error_code": ErrorCode.none, "partition_index": p.index, "leader_id": node,
                   "leader_epoch": 0, "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
                  for p in topic.partitions]
    return {"error_code": ErrorCode.none, "name": name, "topic_id": topic.topic_id,
            "is_internal": topic.internal, "partitions": partitions,
            "topic_authorized_operations": operations}


@handles(DESCRIBE_CLUSTER, 0, 1)
async def describe_cluster(ctx: RequestContext, body: Any) -> dict[str, Any]:
    broker = ctx.broker
    return {"error_code": ErrorCode.none, "endpoint_type": 1, "cluster_id": broker.cluster_id,
            "controller_id": broker.node_id, "brokers": [_broker(ctx)],
            "cluster_authorized_operations": authorized_operations(
                ctx, body, "include_cluster_authorized_operations", ResourceType.CLUSTER, CLUSTER_NAME)}
