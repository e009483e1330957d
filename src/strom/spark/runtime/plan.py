"""Driver-side planning: sub-topologies, their stream tasks, and the internal topics they need.

As Kafka Streams' partition assignor does, the number of tasks of a sub-topology is the largest
partition count among its source topics; a repartition topic gets the partition count of the
sub-topology writing it; a store's changelog has one partition per task of its sub-topology.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from strom.errors import BrokerUnavailableError, TopologyError
from strom.kafka import clients
from strom.streams.config import (
    AUTO_OFFSET_RESET,
    REPLICATION_FACTOR,
    WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION_MS,
    StreamsConfig,
)
from strom.streams.processor.api import AutoOffsetReset
from strom.streams.processor.internals.task import StreamTask
from strom.streams.processor.records import TaskId
from strom.streams.processor.topology import Topology
from strom.streams.state.cache import ThreadCache

__all__ = [
    "COMPACTED",
    "ApplicationPlan",
    "InternalTopicSpec",
    "SubtopologyTasks",
    "check_tasks_build",
    "create_internal_topics",
    "existing_topics",
    "plan_application",
]

log = logging.getLogger(__name__)

_TIMEOUT_S = 30.0
COMPACTED = {"cleanup.policy": "compact"}
_NO_SINK: Any = None  # a task built only to validate it never sends


@dataclass(frozen=True)
class SubtopologyTasks:
    """One sub-topology as the runtime runs it: one Spark streaming query with ``tasks`` tasks."""

    id: int
    source_topics: dict[str, int]  # real topic name -> partition count
    tasks: int
    changelog_topics: tuple[str, ...]

    def owned_topics(self, partition: int) -> list[str]:
        """The source topics that have partition ``partition`` (task ``<id>_<partition>`` reads them)."""
        return [t for t, count in self.source_topics.items() if partition < count]


@dataclass(frozen=True)
class InternalTopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


@dataclass(frozen=True)
class ApplicationPlan:
    subtopologies: tuple[SubtopologyTasks, ...]
    internal_topics: tuple[InternalTopicSpec, ...]
    latest_start_topics: tuple[str, ...] = ()
    """Source topics that start at their end where nothing is committed (AutoOffsetReset.LATEST)."""
    replication_factor: int = -1
    """``replication.factor`` of the internal topics (-1: the broker's default)."""

    @property
    def task_ids(self) -> list[str]:
        return [f"{s.id}_{p}" for s in self.subtopologies for p in range(s.tasks)]


def plan_application(topology: Topology, config: StreamsConfig, admin: AdminClient) -> ApplicationPlan:
    """Reads the source topics' partition counts and derives tasks and internal topics.

    A missing source topic raises TopologyError; joined topics that disagree, CoPartitioningError.
    """
    builder = topology.internal
    builder.application_id = config.application_id
    existing = existing_topics(admin, config["bootstrap.servers"])
    sources = {builder.decorate(t) for sub in builder.subtopologies() for t in sub.source_topics
               if t not in builder.internal_topics}
    clients.check_described(admin, sorted(sources - existing.keys()), config.client_props("admin."))
    counts = builder.topic_partitions(existing)
    subtopologies, internal = [], []
    for sub in builder.subtopologies():
        sources = {builder.decorate(t): counts[t] for t in sub.source_topics}
        tasks = max(sources.values())
        changelogs = []
        for store in sub.stores:
            store_builder = builder.store_builders[store]
            if getattr(store_builder, "logging_enabled", False):
                topic = builder.changelog_topic(store)
                changelogs.append(topic)
                internal.append(InternalTopicSpec(topic, tasks, _changelog_config(store_builder, config)))
        subtopologies.append(SubtopologyTasks(sub.id, sources, tasks, tuple(changelogs)))
    for name in builder.internal_topics:
        internal.append(InternalTopicSpec(builder.decorate(name), counts[name], config.topic_configs()))
    return ApplicationPlan(tuple(subtopologies), tuple(internal), _latest_start_topics(topology, config),
                           config[REPLICATION_FACTOR])


def _changelog_config(store_builder: Any, config: StreamsConfig) -> dict[str, str]:
    """As Kafka Streams configures a changelog: compacted, then the ``topic.`` configs, then the store's
    own (a windowed store's retention includes ``windowstore.changelog.additional.retention.ms``)."""
    windowed = getattr(store_builder, "changelog_config", None)
    own = (windowed(config[WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION_MS]) if windowed is not None
           else store_builder.log_config)
    return {**COMPACTED, **config.topic_configs(), **own}


def _latest_start_topics(topology: Topology, config: StreamsConfig) -> tuple[str, ...]:
    """The user's source topics whose source (or, without its own policy, ``auto.offset.reset``) says
    LATEST; internal topics always start at the earliest offset."""
    builder = topology.internal
    default = AutoOffsetReset(config[AUTO_OFFSET_RESET])
    internal = builder.internal_topics
    topics = {t for sub in builder.subtopologies() for t in sub.source_topics if t not in internal}
    return tuple(sorted(t for t in topics if (builder.offset_reset(t) or default) is AutoOffsetReset.LATEST))


def check_tasks_build(topology: Topology, config: StreamsConfig) -> None:
    """Builds (without opening stores) one task per sub-topology on the driver, so a missing serde
    or a wiring mistake fails ``start()`` with its ConfigError/TopologyError, not a Spark task."""
    builder = topology.internal
    for sub in builder.subtopologies():
        StreamTask(TaskId(sub.id, 0), builder, config, _NO_SINK, ThreadCache(0))


def existing_topics(admin: AdminClient, bootstrap_servers: str) -> dict[str, int]:
    """Topic name -> partition count of every topic the cluster has."""
    try:
        cluster = admin.list_topics(timeout=_TIMEOUT_S)
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"Could not read topic metadata from bootstrap.servers={bootstrap_servers!r}: {exc}. "
            "Check that the broker is running (e.g. `strom broker`)."
        ) from exc
    return {name: len(meta.partitions) for name, meta in cluster.topics.items() if meta.error is None}


def create_internal_topics(plan: ApplicationPlan, admin: AdminClient, bootstrap_servers: str,
                           settings: Mapping[str, Any] | None = None) -> list[str]:
    """Creates missing repartition and changelog topics; an existing one must have the planned
    partition count. Returns the names created. `settings` are the admin client's (security)."""
    existing = existing_topics(admin, bootstrap_servers)
    wrong = {t.name: (existing[t.name], t.partitions) for t in plan.internal_topics
             if t.name in existing and existing[t.name] != t.partitions}
    if wrong:
        raise TopologyError(
            "Internal topics exist with the wrong partition count (have, need): "
            + ", ".join(f"{name} {have}/{need}" for name, (have, need) in sorted(wrong.items()))
            + ". Delete them (the application rebuilds them) or reset the application."
        )
    missing = [t for t in plan.internal_topics if t.name not in existing]
    for spec in missing:
        clients.create_topics(bootstrap_servers, {spec.name: spec.partitions}, spec.config,
                              replication_factor=plan.replication_factor, settings=settings)
        log.info("Created internal topic %s (%d partitions, replication factor %d, %s)", spec.name,
                 spec.partitions, plan.replication_factor, spec.config)
    return [t.name for t in missing]
