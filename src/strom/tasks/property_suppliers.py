"""Property suppliers whose values change at run time: a watched JSON file and a compacted Kafka topic.

Both provide every property; a key absent from the source (or deleted by a tombstone) falls back to
its default. Put a :class:`~strom.tasks.properties.StaticPropertySupplier` first to pin a value.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from strom.errors import ConfigError, UnknownTopicError
from strom.kafka import clients
from strom.tasks.properties import ProcessorProperties, Property, PropertyDefinition

__all__ = ["FilePropertySupplier", "KafkaTopicPropertySupplier"]

log = logging.getLogger(__name__)


class _DynamicSupplier:
    """Holds one Property per definition and applies updates (name -> raw value or None for default)."""

    def __init__(self) -> None:
        self._properties = {d.name: Property(d) for d in ProcessorProperties.ALL}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def provide(self, definition: PropertyDefinition) -> Property | None:
        return self._properties[definition.name]

    def _apply(self, name: str, raw: Any | None) -> None:
        prop = self._properties.get(name)
        if prop is None:
            log.warning("Ignoring unknown property %r from %s", name, self)
            return
        prop.set(prop.definition.default if raw is None else raw)

    def close(self) -> None:
        """Stops following the source (waits for the follower thread to release it)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)


class FilePropertySupplier(_DynamicSupplier):
    """Reads a JSON object ``{"decaton.partition.concurrency": 8, ...}`` and re-reads it when it changes."""

    def __init__(self, path: str | os.PathLike[str], poll_interval_s: float = 0.5) -> None:
        super().__init__()
        self._path = os.fspath(path)
        self._poll_interval_s = poll_interval_s
        self._mtime: int | None = None
        self._seen: set[str] = set()
        if not os.path.exists(self._path):
            raise ConfigError(f"Property file {self._path!r} does not exist: create it with a JSON object "
                              "of decaton.* properties, e.g. {\"decaton.partition.concurrency\": 4}.")
        self._reload(strict=True)
        self._thread = threading.Thread(target=self._watch, name=f"property-file-{self._path}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"FilePropertySupplier({self._path!r})"

    def _reload(self, strict: bool) -> None:
        try:
            mtime = os.stat(self._path).st_mtime_ns
            if mtime == self._mtime:
                return
            with open(self._path, encoding="utf-8") as f:
                values = json.load(f)
            if not isinstance(values, dict):
                raise ValueError("the top level must be a JSON object")
        except (OSError, ValueError) as exc:
            if strict:
                raise ConfigError(f"Cannot read property file {self._path!r}: {exc}. It must hold a JSON "
                                  "object of decaton.* properties.") from exc
            log.error("Keeping current properties: cannot read %s: %s", self._path, exc)
            return
        self._mtime = mtime
        for name in self._seen - values.keys():
            self._apply(name, None)
        for name, raw in values.items():
            if strict:
                ProcessorProperties.definition(name).parse(raw)
            self._apply(name, raw)
        self._seen = set(values)

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_interval_s):
            self._reload(strict=False)


class KafkaTopicPropertySupplier(_DynamicSupplier):
    """Follows a compacted topic: key = property name, value = its value as text, tombstone = default.
    ``settings``: the reader's librdkafka settings beside the address (a secured cluster's
    ``security.protocol``, ``ssl.*``, ``sasl.*``)."""

    def __init__(self, bootstrap_servers: str, topic: str, initial_load_timeout_s: float = 10.0,
                 settings: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._topic = topic
        self._consumer = clients.consumer(bootstrap_servers, **{**(settings or {}),
                                                                "isolation.level": "read_uncommitted"})
        metadata = self._consumer.list_topics(topic, timeout=initial_load_timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            self._consumer.close()
            raise UnknownTopicError(f"Property topic {topic!r} does not exist: create it (cleanup.policy="
                                    "compact) and write decaton.* properties keyed by name.")
        partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions]
        self._consumer.assign(partitions)
        self._load_to_end(partitions, initial_load_timeout_s)
        self._thread = threading.Thread(target=self._follow, name=f"property-topic-{topic}", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"KafkaTopicPropertySupplier({self._topic!r})"

    def _load_to_end(self, partitions: list[TopicPartition], timeout_s: float) -> None:
        ends = {tp.partition: self._consumer.get_watermark_offsets(tp, timeout=timeout_s)[1]
                for tp in partitions}
        deadline = time.monotonic() + timeout_s
        positions = {p: 0 for p in ends}
        while any(positions[p] < end for p, end in ends.items()) and time.monotonic() < deadline:
            for msg in self._consumer.consume(500, 0.2):
                self._handle(msg)
                if msg.error() is None:
                    positions[msg.partition()] = msg.offset() + 1

    def _handle(self, msg: Any) -> None:
        if msg.error() is not None:
            if msg.error().code() != KafkaError._PARTITION_EOF:
                log.warning("Property topic %s: %s", self._topic, msg.error())
            return
        if msg.key() is None:
            return
        value = msg.value()
        self._apply(msg.key().decode("utf-8"), None if value is None else value.decode("utf-8"))

    def _follow(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in self._consumer.consume(500, 0.2):
                    self._handle(msg)
        finally:
            self._consumer.close()
