"""All topics of the broker on disk: creation, deletion, partitions, configs, flush, retention.

Layout: ``<data dir>/topics/<topic>/topic.json`` (id, partition count, configs set explicitly) and
``<data dir>/topics/<topic>/<partition>/`` (segments). A topic being deleted is first renamed so
a crash in the middle never brings it back half-deleted.
"""

from __future__ import annotations

import json
import logging
import re
import resource
import shutil
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from strom.broker.config import BrokerConfig, parse_topic_configs
from strom.broker.log import cleaner
from strom.broker.log.partition import Partition
from strom.broker.log.segment import Segment

log = logging.getLogger(__name__)

FILES_PER_PARTITION = 2  # the active segment's file, and its reader while a Fetch sends from it
PARTITIONS_PER_STEP = 200  # partitions created between pauses (a few milliseconds of work)
RESERVED_FILES = 64  # the listener, indexes and snapshots being written, the broker's own files
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
INTERNAL_TOPICS = (CONSUMER_OFFSETS, TRANSACTION_STATE)


T = TypeVar("T")
Steps = Generator[None, None, T]  # work done in steps: each `yield` is a point to pause at


def run_steps(steps: Steps[T]) -> T:
    """Runs stepwise work to its end without pausing; returns its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class TopicExistsError(Exception):
    pass


class InvalidTopicError(Exception):
    pass


class InvalidPartitionsError(Exception):
    pass


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    directory: Path
    overrides: dict[str, Any]  # configs set explicitly
    config: dict[str, Any]  # effective configs, shared with the partitions
    partitions: list[Partition] = field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def save(self) -> None:
        meta = {"id": str(self.topic_id), "partitions": len(self.partitions), "configs": self.overrides}
        tmp = self.directory / "topic.json.tmp"
        tmp.write_text(json.dumps(meta))
        tmp.replace(self.directory / "topic.json")


def validate_topic_name(name: str) -> None:
    if not name or name in (".", "..") or not _LEGAL_NAME.fullmatch(name):
        raise InvalidTopicError(
            f"Topic name {name!r} is illegal: use 1 to 249 characters of [a-zA-Z0-9._-], not '.' or '..'")


class LogManager:
    """Owns every topic and partition log under the data directory."""

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self.config = config
        self.root = data_dir / "topics"
        self.root.mkdir(parents=True, exist_ok=True)
        self.topics: dict[str, Topic] = {}
        self._creating: set[str] = set()  # topics whose partitions are being created in steps
        self._load()

    def _load(self) -> None:
        for trash in self.root.glob("*.deleting"):
            shutil.rmtree(trash, ignore_errors=True)
        for meta_path in sorted(self.root.glob("*/topic.json")):
            meta = json.loads(meta_path.read_text())
            topic = self._topic(meta_path.parent.name, uuid.UUID(meta["id"]), meta["configs"])
            topic.partitions = [self._partition(topic, i) for i in range(meta["partitions"])]
            self.topics[topic.name] = topic
        log.info("loaded %d topic(s) from %s", len(self.topics), self.root)

    def _topic(self, name: str, topic_id: uuid.UUID, overrides: dict[str, Any]) -> Topic:
        return Topic(name, topic_id, self.root / name, dict(overrides), self._effective(overrides))

    def _effective(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """A topic's configs: its own, then the broker's defaults (dynamic ones included)."""
        return {**self.config.topic_defaults(), **parse_topic_configs(overrides)}

    def refresh_topic_defaults(self) -> None:
        """After a dynamic broker config changed: every topic takes the broker's new defaults."""
        for topic in self.topics.values():
            topic.config.update(self._effective(topic.overrides))  # the partitions share this dict

    def _partition(self, topic: Topic, index: int) -> Partition:
        return Partition(topic.name, index, topic.directory / str(index), topic.config)

    # ---- topics -------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: dict[str, Any] | None = None,
                     validate_only: bool = False) -> Topic | None:
        """Creates a topic; raises TopicExistsError, InvalidTopicError, InvalidPartitionsError or
        ValueError (a bad config)."""
        return run_steps(self.creating_topic(name, partitions, configs, validate_only))

    def creating_topic(self, name: str, partitions: int, configs: dict[str, Any] | None = None,
                       validate_only: bool = False) -> Steps[Topic | None]:
        """`create_topic` in steps of PARTITIONS_PER_STEP partitions (see `run_steps`): a request
        handler lets other clients be served in between. The topic is visible once complete."""
        validate_topic_name(name)
        if name in self.topics or name in self._creating:
            raise TopicExistsError(f"Topic {name!r} already exists.")
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if not 1 <= partitions <= 100_000:
            raise InvalidPartitionsError(f"Number of partitions must be in [1, 100000], got {partitions}")
        topic = self._topic(name, uuid.uuid4(), {k: str(v) for k, v in (configs or {}).items()})
        self._check_open_files(partitions)
        if validate_only:
            return None
        self._creating.add(name)
        try:
            topic.directory.mkdir(parents=True, exist_ok=True)
            yield from self._adding_partitions(topic, partitions)
        except BaseException:  # also GeneratorExit: a handler cancelled between steps
            shutil.rmtree(topic.directory, ignore_errors=True)
            raise
        finally:
            self._creating.discard(name)
        self.topics[name] = topic
        log.info("created topic %s with %d partition(s)", name, partitions)
        return topic

    def ensure_internal(self, name: str, partitions: int, segment_bytes: int = 100 << 20) -> Topic:
        """The compacted internal topic `name`, created on first use (segments of 100 MiB as
        Kafka's offsets.topic.segment.bytes, so compaction gets closed segments to work on)."""
        existing = self.topics.get(name)
        if existing is not None:
            return existing
        configs = {"cleanup.policy": "compact", "segment.bytes": segment_bytes}
        topic = self.create_topic(name, partitions, configs)
        assert topic is not None
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name)
        for partition in topic.partitions:
            partition.close()
        trash = topic.directory.with_name(f"{name}.{uuid.uuid4().hex}.deleting")
        topic.directory.rename(trash)
        shutil.rmtree(trash, ignore_errors=True)
        log.info("deleted topic %s", name)

    def add_partitions(self, name: str, count: int, validate_only: bool = False) -> None:
        topic = self.topics[name]
        if count <= len(topic.partitions):
            raise InvalidPartitionsError(
                f"Topic {name!r} has {len(topic.partitions)} partitions; "
                f"the new count {count} must be larger")
        self._check_open_files(count - len(topic.partitions))
        if validate_only:
            return
        run_steps(self._adding_partitions(topic, count))

    def _adding_partitions(self, topic: Topic, count: int) -> Steps[None]:
        """Opens partitions up to `count` (a step per PARTITIONS_PER_STEP) and saves the topic; on
        an error (no descriptors or disk space left) or when abandoned, the new partitions are
        closed again and their directories removed."""
        existing = topic.partitions
        created: list[Partition] = []
        try:
            for i in range(len(existing), count):
                created.append(self._partition(topic, i))
                if len(created) % PARTITIONS_PER_STEP == 0:
                    yield
            topic.partitions = existing + created
            topic.save()
        except BaseException:
            topic.partitions = existing
            for partition in created:
                partition.release()
                shutil.rmtree(partition.directory, ignore_errors=True)
            raise

    def _check_open_files(self, partitions: int) -> None:
        """Refuses partitions whose segment files would leave too few descriptors for max.connections
        connections (or half the limit, if that is less): the listener must keep accepting."""
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return
        reserved = min(self.config["max.connections"], limit // 2) + RESERVED_FILES
        needed = Segment.open_files + FILES_PER_PARTITION * partitions
        if needed + reserved > limit:
            raise InvalidPartitionsError(
                f"{partitions} more partition(s) need about {FILES_PER_PARTITION * partitions} open files; "
                f"{Segment.open_files} are open and the limit is {limit} ({reserved} kept for connections). "
                "Raise the open-files limit (ulimit -n) or create fewer partitions")

    def alter_config(self, name: str, overrides: dict[str, Any], validate_only: bool = False) -> None:
        """Replaces the topic's explicit configs (already merged by the caller) after validating."""
        topic = self.topics[name]
        effective = self._effective(overrides)
        if validate_only:
            return
        topic.overrides = {k: str(v) for k, v in overrides.items()}
        topic.config.clear()
        topic.config.update(effective)  # the partitions share this dict
        topic.save()

    def partition(self, topic: str, index: int) -> Partition | None:
        found = self.topics.get(topic)
        if found is None or not 0 <= index < len(found.partitions):
            return None
        return found.partitions[index]

    # ---- housekeeping -------------------------------------------------------------------------
    def all_partitions(self) -> list[Partition]:
        return [p for t in list(self.topics.values()) for p in t.partitions]

    def flush_due(self) -> None:
        """Applies log.flush.interval.ms to partitions that are idle since their last write."""
        for partition in self.all_partitions():
            partition.flush_if_due()

    def apply_retention(self) -> None:
        now_ms = int(time.time() * 1000)
        for partition in self.all_partitions():
            if "delete" in partition.config["cleanup.policy"]:
                partition.apply_retention(now_ms)

    def clean_compacted(self) -> None:
        """Compacts every compacted partition; one that fails is logged and the others still run."""
        for partition in self.all_partitions():
            if "compact" in partition.config["cleanup.policy"]:
                try:
                    cleaner.clean(partition)
                except Exception:
                    log.exception("compaction of %s-%d failed; the other partitions go on",
                                  partition.topic, partition.index)

    def close(self) -> None:
        """Closes every partition; one that cannot be flushed (a full disk) does not stop the others."""
        for partition in self.all_partitions():
            try:
                partition.close()
            except OSError as exc:
                log.error("%s-%d was not closed cleanly (%s); its log is recovered at the next start",
                          partition.topic, partition.index, exc)
