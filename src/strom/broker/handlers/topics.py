"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs and DeleteRecords."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from strom.broker.config import (
    BROKER_SPECS,
    CLUSTER_DEFAULT,
    DEFAULT,
    DYNAMIC_BROKER_KEYS,
    GROUP_SPECS,
    LISTENER_PREFIX,
    PER_BROKER,
    RELOADABLE_SSL_KEYS,
    STATIC,
    TOPIC_SYNONYM,
    BrokerConfig,
    NotDynamicError,
    Synonym,
    is_sensitive,
    render,
)
from strom.broker.handlers import RequestContext, handles
from strom.broker.log.manager import (
    InvalidPartitionsError,
    InvalidTopicError,
    Steps,
    TopicExistsError,
)
from strom.broker.log.partition import OffsetOutOfRangeError
from strom.broker.security.acls import CLUSTER_NAME, Operation, ResourceType
from strom.broker.security.tls import KeystoreRefused

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 37, 44
TOPIC_RESOURCE, BROKER_RESOURCE, GROUP_RESOURCE = 2, 4, 32
# ConfigSource of DescribeConfigs
SOURCE_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC_BROKER = 1, 2, 3, 4
SOURCE_DEFAULT, SOURCE_GROUP = 5, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

log = logging.getLogger(__name__)
T = TypeVar("T")


@handles(CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, body: Any) -> dict[str, Any]:
    logs = ctx.broker.logs
    results = []
    for request in body.topics:
        await asyncio.sleep(0)  # one topic per turn of the event loop: others are served in between
        result: dict[str, Any] = {"name": request.name, "num_partitions": -1, "replication_factor": -1}
        try:
            if not may_create(ctx, request.name):
                raise _Refused(ErrorCode.topic_authorization_failed, "Authorization failed.")
            if request.replication_factor not in (-1, 1):
                raise _Refused(ErrorCode.invalid_replication_factor,
                               f"replication factor must be 1 (one broker), got {request.replication_factor}")
            partitions = request.num_partitions
            if request.assignments:
                if request.num_partitions != -1 or request.replication_factor != -1:
                    raise _Refused(ErrorCode.invalid_request,
                                   "Both numPartitions or replicationFactor and replicasAssignments were "
                                   "set. Both cannot be used at the same time.")
                indexes = sorted(a.partition_index for a in request.assignments)
                if indexes != list(range(len(request.assignments))):
                    raise _Refused(ErrorCode.invalid_replica_assignment,
                                   "partitions of a manual assignment must be numbered 0, 1, 2, ...")
                _check_assignment(ctx, [a.broker_ids for a in request.assignments])
                partitions = len(request.assignments)
            configs = {c.name: c.value for c in request.configs}
            topic = await _paused(logs.creating_topic(request.name, partitions, configs,
                                                      body.validate_only))
            if topic is not None:
                result.update(topic_id=topic.topic_id, num_partitions=len(topic.partitions),
                              replication_factor=1, configs=_describe_topic(ctx.broker.config, topic, None))
            result["error_code"] = ErrorCode.none
        except _Refused as refused:
            result.update(error_code=refused.code, error_message=str(refused))
        except TopicExistsError as exc:
            result.update(error_code=ErrorCode.topic_already_exists, error_message=str(exc))
        except InvalidTopicError as exc:
            result.update(error_code=ErrorCode.invalid_topic_exception, error_message=str(exc))
        except InvalidPartitionsError as exc:
            result.update(error_code=ErrorCode.invalid_partitions, error_message=str(exc))
        except OSError as exc:
            result.update(error_code=ErrorCode.kafka_storage_error, error_message=storage_error(exc))
        except ValueError as exc:
            result.update(error_code=ErrorCode.invalid_config, error_message=str(exc))
        results.append(result)
    return {"topics": results}


async def _paused(steps: Steps[T]) -> T:
    """Runs stepwise work with a turn of the event loop between steps, so that creating thousands
    of partitions does not stall other clients; abandoned work (a cancelled request) is undone."""
    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            await asyncio.sleep(0)
    finally:
        steps.close()


def _check_assignment(ctx: RequestContext, assignment: list[Any]) -> None:
    """A manual replica assignment can only place every partition's one replica on this broker."""
    node = ctx.broker.node_id
    for replicas in assignment:
        if not replicas:
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           "The manual partition assignment includes an empty replica list.")
        for broker_id in replicas:
            if broker_id != node:
                raise _Refused(ErrorCode.invalid_replica_assignment,
                               f"The manual partition assignment includes broker {broker_id}, but no such "
                               f"broker is registered (this one-node broker is {node}).")
        if len(replicas) > 1:
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           f"The manual partition assignment includes the broker {node} more than once.")


def storage_error(exc: OSError) -> str:
    """What a client is told when the data directory cannot take a topic or partition."""
    log.error("cannot create partition files: %s", exc)
    return f"the broker cannot create the partition files: {exc}"


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@handles(DELETE_TOPICS, 1, 5)
async def delete_topics(ctx: RequestContext, body: Any) -> dict[str, Any]:
    results = []
    for name in body.topic_names:
        topic = ctx.broker.logs.topics.get(name)
        if not ctx.authorize(Operation.DELETE, ResourceType.TOPIC, name):
            results.append({"name": name, "error_code": ErrorCode.topic_authorization_failed})
        elif topic is None:
            results.append({"name": name, "error_code": ErrorCode.unknown_topic_or_partition})
        elif topic.internal:
            results.append({"name": name, "error_code": ErrorCode.invalid_topic_exception,
                            "error_message": "internal topics cannot be deleted"})
        else:
            ctx.broker.delete_topic(name)
            results.append({"name": name, "error_code": ErrorCode.none})
    return {"responses": results}


@handles(CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, body: Any) -> dict[str, Any]:
    results = []
    for request in body.topics:
        try:
            if not ctx.authorize(Operation.ALTER, ResourceType.TOPIC, request.name):
                raise _Refused(ErrorCode.topic_authorization_failed, "Authorization failed.")
            if request.name not in ctx.broker.logs.topics:
                raise _Refused(ErrorCode.unknown_topic_or_partition, f"topic {request.name!r} does not exist")
            if request.assignments is not None:
                added = request.count - len(ctx.broker.logs.topics[request.name].partitions)
                if added > 0 and len(request.assignments) != added:
                    raise _Refused(ErrorCode.invalid_replica_assignment,
                                   f"Attempted to add {added} additional partition(s), but only "
                                   f"{len(request.assignments)} assignment(s) were specified.")
                _check_assignment(ctx, [a.broker_ids for a in request.assignments])
            ctx.broker.logs.add_partitions(request.name, request.count, body.validate_only)
            results.append({"name": request.name, "error_code": ErrorCode.none})
        except _Refused as refused:
            results.append({"name": request.name, "error_code": refused.code, "error_message": str(refused)})
        except InvalidPartitionsError as exc:
            results.append({"name": request.name, "error_code": ErrorCode.invalid_partitions,
                            "error_message": str(exc)})
        except OSError as exc:
            results.append({"name": request.name, "error_code": ErrorCode.kafka_storage_error,
                            "error_message": storage_error(exc)})
    return {"results": results}


@handles(DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: RequestContext, body: Any) -> dict[str, Any]:
    """Each config's value and where it comes from; with include_synonyms, every place it is set
    (Kafka's synonyms: the topic's own, this broker's dynamic config, the cluster default, the static
    config and the default, each under its own name)."""
    results = []
    synonyms = body.include_synonyms
    for resource in body.resources:
        result = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                  "error_code": ErrorCode.none}
        keys = resource.configuration_keys
        refusal = _config_refusal(ctx, resource, Operation.DESCRIBE_CONFIGS)
        if refusal is not None:
            result.update(error_code=refusal, error_message="Authorization failed.")
        elif resource.resource_type == TOPIC_RESOURCE:
            topic = ctx.broker.logs.topics.get(resource.resource_name)
            if topic is None:
                result.update(error_code=ErrorCode.unknown_topic_or_partition,
                              error_message=f"topic {resource.resource_name!r} does not exist")
            else:
                result["configs"] = _describe_topic(ctx.broker.config, topic, keys, synonyms)
        elif resource.resource_type == BROKER_RESOURCE:
            result["configs"] = _describe_broker(ctx, resource.resource_name, keys, synonyms)
        elif resource.resource_type == GROUP_RESOURCE:
            own = ctx.broker.dynamic_configs.groups.get(resource.resource_name, {})
            result["configs"] = [
                _entry(k, own.get(k, default), [Synonym(k, render(own.get(k, default)),
                                                        GROUP if k in own else DEFAULT)], False, synonyms)
                for k, (_, default) in GROUP_SPECS.items() if keys is None or k in keys]
        else:
            result.update(error_code=ErrorCode.invalid_request, error_message="unsupported resource type")
        results.append(result)
    return {"results": results}


def _describe_broker(ctx: RequestContext, name: str, keys: Any, synonyms: bool) -> list[dict[str, Any]]:
    """This broker's configs (and the ``listener.name.*`` keys set) and where each comes from; the cluster
    default (name empty): the dynamic configs set there, with their synonyms there only."""
    config = ctx.broker.config
    if not name:
        return [_entry(k, v, [s for s in config.synonyms(k) if s.layer == CLUSTER_DEFAULT], False, synonyms)
                for k, v in config.dynamic[CLUSTER_DEFAULT].items() if keys is None or k in keys]
    values = {**{key: config[key] for key in BROKER_SPECS}, **config.static_listener_keys,
              **{k: v for k, v in config.dynamic[PER_BROKER].items() if k.startswith(LISTENER_PREFIX)}}
    changeable = DYNAMIC_BROKER_KEYS | RELOADABLE_SSL_KEYS
    return [_entry(key, value, config.synonyms(key), key not in changeable, synonyms, is_sensitive(key))
            for key, value in values.items() if keys is None or key in keys]


def _describe_topic(config: BrokerConfig, topic: Any, keys: Any,
                    synonyms: bool = False) -> list[dict[str, Any]]:
    """Each config's value and source: the topic's own, a broker config (dynamic or static), or the
    default."""
    entries = []
    for key, value in sorted(topic.config.items()):
        if keys is None or key in keys:
            own = [Synonym(key, render(value), TOPIC)] if key in topic.overrides else []
            entries.append(_entry(key, value, own + config.synonyms(TOPIC_SYNONYM[key]), False, synonyms))
    return entries


TOPIC, GROUP = "topic", "group"
SOURCES = {TOPIC: SOURCE_TOPIC, PER_BROKER: SOURCE_DYNAMIC_BROKER, CLUSTER_DEFAULT: SOURCE_DYNAMIC_DEFAULT,
           STATIC: SOURCE_STATIC_BROKER, DEFAULT: SOURCE_DEFAULT, GROUP: SOURCE_GROUP}
"""DescribeConfigs' config source of each layer a value comes from."""


def _entry(name: str, value: Any, where: list[Synonym], read_only: bool, include_synonyms: bool,
           sensitive: bool = False) -> dict[str, Any]:
    """A DescribeConfigs entry: its source is that of its first synonym (the default without any); its
    value is never shown if `sensitive`."""
    source = SOURCES[where[0].layer] if where else SOURCE_DEFAULT
    shown = None if sensitive or value is None else render(value)
    return {"name": name, "value": shown, "read_only": read_only, "config_source": source, "source": source,
            "is_default": source == SOURCE_DEFAULT, "is_sensitive": sensitive,
            "synonyms": [{"name": s.name, "value": s.value, "source": SOURCES[s.layer]} for s in where]
            if include_synonyms else []}


@handles(ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, body: Any) -> dict[str, Any]:
    """The legacy AlterConfigs (librdkafka's alter_configs): a resource's explicit configs become
    exactly the ones given; those left out fall back to their defaults."""
    return {"responses": [_alter(ctx, resource, body.validate_only, incremental=False)
                          for resource in body.resources]}


@handles(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, body: Any) -> dict[str, Any]:
    return {"responses": [_alter(ctx, resource, body.validate_only, incremental=True)
                          for resource in body.resources]}


def _alter(ctx: RequestContext, resource: Any, validate_only: bool, incremental: bool) -> dict[str, Any]:
    """A topic's configs, this broker's or the cluster's dynamic broker configs, or a group's configs."""
    response = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                "error_code": ErrorCode.none}

    def new_values(current: dict[str, str], effective: Mapping[str, Any]) -> dict[str, str]:
        if incremental:
            return _apply_ops(dict(current), effective, resource.configs)
        return {c.name: c.value or "" for c in resource.configs}
    try:
        refusal = _config_refusal(ctx, resource, Operation.ALTER_CONFIGS)
        if refusal is not None:
            raise _Refused(refusal, "Authorization failed.")
        name, dynamic = resource.resource_name, ctx.broker.dynamic_configs
        if resource.resource_type == BROKER_RESOURCE:
            layer = _broker_layer(ctx, name)
            config = ctx.broker.config
            current = {k: render(v) for k, v in config.dynamic[layer].items()}
            effective = {k: config[k] for k in BROKER_SPECS}
            dynamic.alter_broker(layer, new_values(current, effective), validate_only,
                                 [c.name for c in resource.configs])
        elif resource.resource_type == GROUP_RESOURCE:
            current = {k: str(v) for k, v in dynamic.groups.get(name, {}).items()}
            defaults = {k: default for k, (_, default) in GROUP_SPECS.items()}
            dynamic.alter_group(name, new_values(current, {**defaults, **current}), validate_only)
        elif resource.resource_type == TOPIC_RESOURCE:
            topic = ctx.broker.logs.topics.get(name)
            if topic is None:
                raise _Refused(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
            ctx.broker.logs.alter_config(topic.name, new_values(topic.overrides, topic.config), validate_only)
        else:
            raise _Refused(ErrorCode.invalid_request, f"configs of resource type {resource.resource_type} "
                           "cannot be altered (topic, broker and group configs can)")
    except _Refused as refused:
        response.update(error_code=refused.code, error_message=str(refused))
    except (NotDynamicError, KeystoreRefused) as exc:
        response.update(error_code=ErrorCode.invalid_request, error_message=str(exc))
    except ValueError as exc:
        response.update(error_code=ErrorCode.invalid_config, error_message=str(exc))
    return response


def _broker_layer(ctx: RequestContext, name: str) -> str:
    """Kafka's resource names of broker configs: this broker's node id, or empty for the cluster."""
    if not name:
        return CLUSTER_DEFAULT
    if name == str(ctx.broker.node_id):
        return PER_BROKER
    raise _Refused(ErrorCode.invalid_request, f"Unexpected broker id, expected {ctx.broker.node_id} or "
                   f"empty string, but received {name}")


def _config_refusal(ctx: RequestContext, resource: Any, operation: Operation) -> ErrorCode | None:
    """TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED if the client may not do `operation` on the configs
    of this topic, this group or of the broker (a cluster operation in Kafka)."""
    if resource.resource_type == TOPIC_RESOURCE:
        if not ctx.authorize(operation, ResourceType.TOPIC, resource.resource_name):
            return ErrorCode.topic_authorization_failed
    elif resource.resource_type == GROUP_RESOURCE:
        if not ctx.authorize(operation, ResourceType.GROUP, resource.resource_name):
            return ErrorCode.group_authorization_failed
    elif resource.resource_type == BROKER_RESOURCE and not ctx.authorize_cluster(operation):
        return ErrorCode.cluster_authorization_failed
    return None


def may_create(ctx: RequestContext, topic: str) -> bool:
    """CREATE on the cluster or on the topic (Kafka accepts either)."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return True
    principal, host = ctx.session.principal, ctx.client_host
    return (authorizer.authorize(principal, host, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
            or ctx.authorize(Operation.CREATE, ResourceType.TOPIC, topic))


def _apply_ops(overrides: dict[str, str], effective: dict[str, Any], configs: Any) -> dict[str, str]:
    """The topic's explicit configs after SET / DELETE / APPEND / SUBTRACT (lists start from the
    effective value, as in Kafka)."""
    for config in configs:
        if config.config_operation == SET:
            overrides[config.name] = config.value or ""
        elif config.config_operation == DELETE:
            overrides.pop(config.name, None)
        elif config.config_operation in (APPEND, SUBTRACT):
            current = overrides.get(config.name, render(effective.get(config.name, "")))
            items = [v for v in current.split(",") if v]
            change = [v for v in (config.value or "").split(",") if v]
            if config.config_operation == APPEND:
                items += [v for v in change if v not in items]
            else:
                items = [v for v in items if v not in change]
            overrides[config.name] = ",".join(items)
        else:
            raise _Refused(ErrorCode.invalid_request, f"unknown config operation {config.config_operation}")
    return overrides


@handles(DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, body: Any) -> dict[str, Any]:
    topics = []
    for request in body.topics:
        partitions = []
        allowed = ctx.authorize(Operation.DELETE, ResourceType.TOPIC, request.name)
        for p in request.partitions:
            result = {"partition_index": p.partition_index, "low_watermark": -1}
            partition = ctx.broker.logs.partition(request.name, p.partition_index)
            if not allowed:
                result["error_code"] = ErrorCode.topic_authorization_failed
            elif partition is None:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
            else:
                try:
                    result["low_watermark"] = partition.delete_records_before(p.offset)
                    result["error_code"] = ErrorCode.none
                except OffsetOutOfRangeError:
                    result["error_code"] = ErrorCode.offset_out_of_range
            partitions.append(result)
        topics.append({"name": request.name, "partitions": partitions})
    return {"topics": topics}

