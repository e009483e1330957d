"""Decaton's per-key quota: a key processed faster than ``decaton.per.key.quota.processing.rate`` tasks per
second is a bursting key, and its further tasks go to a shaping topic instead of the processors, so one key
cannot crowd out the others. The subscription also consumes the shaping topics, at that rate per partition.

Rates are estimated per partition over the last one or two windows (``PerKeyQuotaConfig.window_ms``) with
Count-Min sketches, so memory stays constant whatever the number of keys (a key may be overestimated,
never underestimated). Shaped tasks lose per-key order; the retry and shaping topics have no quota.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import struct
import time
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Producer

from strom.errors import ConfigError
from strom.kafka import clients
from strom.tasks.context import ConsumedRecord
from strom.tasks.properties import ProcessorProperties, ProcessorPropertiesView, Property

__all__ = [
    "SHAPING_PRODUCER_CONFIG",
    "SHAPING_TOPIC_SUFFIX",
    "UNLIMITED",
    "KeyCounter",
    "PerKeyQuota",
    "PerKeyQuotaConfig",
    "PerKeyQuotaManager",
    "QuotaCallback",
    "QuotaMetrics",
    "WindowedKeyStat",
]

log = logging.getLogger(__name__)

SHAPING_TOPIC_SUFFIX = "-shaping"
SHAPING_PRODUCER_CONFIG = {"linger.ms": 100}
"""Decaton's preset for the shaping producer: many tasks of a bursting key, batched."""
UNLIMITED = -1
_EPSILON = 0.00005  # Decaton's Count-Min parameters: about 1% of the records a window holds, 99.999% sure
_DELTA = 0.00001
_MAX_WIDTH = 1 << 20


@dataclass(frozen=True)
class QuotaMetrics:
    """What the quota observed of a bursting key: its rate in tasks per second."""

    rate: float


QuotaCallback = Callable[[ConsumedRecord, QuotaMetrics], str]
"""Decaton's QuotaCallback: the topic a task of a bursting key goes to. Called on the subscription's thread:
keep it quick. If it raises, the task is completed without being processed (as in Decaton)."""


@dataclass(frozen=True)
class PerKeyQuotaConfig:
    """Decaton's PerKeyQuotaConfig. ``PerKeyQuotaConfig.shape()`` sends bursting keys' tasks to
    ``<topic>-shaping``; give ``shaping_topics(topic)`` and ``callback`` to choose other topics."""

    shaping_topics: Callable[[str], set[str]]
    callback: Callable[[str], QuotaCallback]
    window_ms: int = 10_000
    producer_config: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.window_ms, bool) or not isinstance(self.window_ms, int) or self.window_ms <= 0:
            raise ConfigError(f"PerKeyQuotaConfig window_ms must be a positive whole number of milliseconds, "
                              f"got {self.window_ms!r}.")

    @classmethod
    def shape(cls, window_ms: int = 10_000) -> PerKeyQuotaConfig:
        def shaping_topic(topic: str) -> str:
            return topic + SHAPING_TOPIC_SUFFIX

        return cls(lambda topic: {shaping_topic(topic)},
                   lambda topic: lambda _record, _metrics: shaping_topic(topic), window_ms)


class KeyCounter:
    """A Count-Min sketch with conservative update: an estimate is never below the true count."""

    def __init__(self, seed: bytes, epsilon: float = _EPSILON, delta: float = _DELTA) -> None:
        self.depth = min(16, max(1, math.ceil(math.log(1 / delta))))  # one blake2b digest holds 16 columns
        width = 1
        while width < math.ceil(math.e / epsilon) and width < _MAX_WIDTH:
            width <<= 1
        self._width = width
        self._mask = width - 1
        self._seed = seed
        self._unpack = struct.Struct(f"<{self.depth}I").unpack
        self.reset()

    def columns(self, key: bytes) -> tuple[int, ...]:
        digest = hashlib.blake2b(key, digest_size=4 * self.depth, key=self._seed).digest()
        mask = self._mask
        return tuple(c & mask for c in self._unpack(digest))

    def increment_and_get(self, columns: tuple[int, ...], amount: int = 1) -> int:
        new = self.get(columns) + amount
        for row, column in zip(self._rows, columns, strict=True):
            if row[column] < new:
                row[column] = new
        return new

    def get(self, columns: tuple[int, ...]) -> int:
        return min(row[column] for row, column in zip(self._rows, columns, strict=True))

    def reset(self) -> None:
        self._rows = [array("q", bytes(8 * self._width)) for _ in range(self.depth)]


class WindowedKeyStat:
    """Counts of a key over the current window and the one before it (if not expired)."""

    def __init__(self, window_ms: int, seed: bytes) -> None:
        self._window_ms = window_ms
        self._starts = [-1, -1]
        self._counters = [KeyCounter(seed), KeyCounter(seed)]  # one seed: columns serve both windows
        self._current = 0

    def record_and_get(self, now_ms: int, key: bytes) -> tuple[int, int]:
        """(start of the counted span in epoch ms, the key's count in it), counting this occurrence."""
        current = self._current
        if self._starts[current] < 0:
            self._starts[current] = now_ms
        if now_ms - self._starts[current] >= self._window_ms:
            current = self._current = 1 - current
            self._starts[current] = now_ms
            self._counters[current].reset()
        counter = self._counters[current]
        columns = counter.columns(key)
        count = counter.increment_and_get(columns)
        start = self._starts[current]
        other = 1 - current
        if self._starts[other] >= 0:
            if self._starts[other] < now_ms - 2 * self._window_ms:
                self._starts[other] = -1
            else:
                count += self._counters[other].get(columns)
                start = min(start, self._starts[other])
        return start, count


class PerKeyQuotaManager:
    """Per partition of the subscribed topic: which keys exceed their quota."""

    def __init__(self, config: PerKeyQuotaConfig, rate: Property,
                 clock: Callable[[], float] = time.time) -> None:
        self._stat = WindowedKeyStat(config.window_ms, os.urandom(16))
        self._window_ms = config.window_ms
        self._rate = rate
        self._clock = clock

    def record(self, key: bytes | None) -> float | None:
        """The key's rate (tasks/s) if it violates its quota, else None (nothing counted without a quota)."""
        quota = self._rate.value
        if key is None or quota == UNLIMITED:
            return None
        now_ms = int(self._clock() * 1000)
        start, count = self._stat.record_and_get(now_ms, key)
        span = now_ms - start
        if span < self._window_ms:  # too early to tell (just started)
            return None
        rate = count / span * 1000
        return rate if rate >= quota else None


class PerKeyQuota:
    """A subscription's quota: makes the partitions' managers and sends shaped tasks to their topics."""

    def __init__(self, config: PerKeyQuotaConfig, topic: str, bootstrap: str,
                 props: ProcessorPropertiesView, settings: Mapping[str, Any]) -> None:
        self.config = config
        self.topic = topic
        self.shaping_topics = sorted(config.shaping_topics(topic))
        self._callback = config.callback(topic)
        self._rate = props.get(ProcessorProperties.PER_KEY_QUOTA_PROCESSING_RATE)
        self._producer: Producer = clients.producer(bootstrap, **{**settings, **SHAPING_PRODUCER_CONFIG,
                                                                  **config.producer_config})

    def manager(self, topic: str) -> PerKeyQuotaManager | None:
        return PerKeyQuotaManager(self.config, self._rate) if topic == self.topic else None

    def shape(self, record: ConsumedRecord, rate: float, complete: Callable[[], None]) -> None:
        """Sends a bursting key's task to the shaping topic; ``complete`` once stored (or given up)."""
        try:
            topic = self._callback(record, QuotaMetrics(rate))
        except Exception:
            log.exception("The per-key quota callback raised; completing the task of key %r unprocessed",
                          record.key)
            complete()
            return

        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                log.error("Could not send the task of bursting key %r to %s: %s", record.key, topic, err)
            complete()

        clients.produce(self._producer, topic, record.value, record.key, headers=record.headers,
                        on_delivery=delivered)

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        return self._producer.flush(timeout_s)
