"""``KTable.suppress`` configuration, named as Kafka Streams: Suppressed and BufferConfig."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.errors import TopologyError
from strom.streams.kstream.options import positive_int
from strom.streams.kstream.windows import Duration, to_millis

__all__ = [
    "BufferConfig",
    "BufferFullStrategy",
    "Suppressed",
]


class BufferFullStrategy(enum.Enum):
    EMIT = "emit"            # emit the oldest records early to make room
    SHUT_DOWN = "shut_down"  # stop the application: results must never be emitted early


@dataclass(frozen=True)
class BufferConfig:
    """How much a suppression buffer may hold, and what happens when it is full."""

    record_limit: int | None = None
    byte_limit: int | None = None
    strategy: BufferFullStrategy = BufferFullStrategy.EMIT
    logging_enabled: bool = True
    log_config: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def unbounded() -> BufferConfig:
        """No limit (bounded only by memory); never emits early."""
        return BufferConfig(strategy=BufferFullStrategy.SHUT_DOWN)

    @staticmethod
    def max_records(records: int) -> BufferConfig:
        """At most ``records`` keys; emits early when full unless ``shut_down_when_full``."""
        return BufferConfig().with_max_records(records)

    @staticmethod
    def max_bytes(size: int) -> BufferConfig:
        """At most ``size`` bytes (keys, values and overhead); emits early when full by default."""
        return BufferConfig().with_max_bytes(size)

    def with_max_records(self, records: int) -> BufferConfig:
        return dataclasses.replace(self, record_limit=positive_int(records, "BufferConfig max records"))

    def with_max_bytes(self, size: int) -> BufferConfig:
        return dataclasses.replace(self, byte_limit=positive_int(size, "BufferConfig max bytes"))

    def emit_early_when_full(self) -> BufferConfig:
        return dataclasses.replace(self, strategy=BufferFullStrategy.EMIT)

    def shut_down_when_full(self) -> BufferConfig:
        return dataclasses.replace(self, strategy=BufferFullStrategy.SHUT_DOWN)

    def with_logging_disabled(self) -> BufferConfig:
        """No changelog for the buffer: what it holds is lost when the task moves or fails (Kafka's)."""
        return dataclasses.replace(self, logging_enabled=False, log_config={})

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> BufferConfig:
        """Log the buffer to its changelog (the default); ``config`` adds topic configs to it."""
        return dataclasses.replace(self, logging_enabled=True, log_config=dict(config or {}))


@dataclass(frozen=True)
class Suppressed:
    """``until_window_closes``: one final result per window and key, when the window closes.
    ``until_time_limit``: at most one update per key every ``time_to_wait`` of stream time."""

    final_results: bool
    time_to_wait_ms: int
    buffer_config: BufferConfig
    name: str | None = None

    @staticmethod
    def until_window_closes(buffer_config: BufferConfig) -> Suppressed:
        if buffer_config.strategy is not BufferFullStrategy.SHUT_DOWN:
            raise TopologyError("until_window_closes never emits early: use BufferConfig.unbounded() or "
                                "a bounded BufferConfig with shut_down_when_full().")
        return Suppressed(True, 0, buffer_config)

    @staticmethod
    def until_time_limit(time_to_wait: Duration, buffer_config: BufferConfig) -> Suppressed:
        return Suppressed(False, to_millis(time_to_wait, "Suppression time limit"), buffer_config)

    def with_name(self, name: str) -> Suppressed:
        return dataclasses.replace(self, name=name)
