"""EmitStrategy (Kafka's KIP-825): when a time-windowed aggregation sends its results downstream."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "EmitStrategy",
    "StrategyType",
]


class StrategyType(enum.Enum):
    ON_WINDOW_UPDATE = "on_window_update"
    ON_WINDOW_CLOSE = "on_window_close"


@dataclass(frozen=True)
class EmitStrategy:
    """``on_window_update()`` (the default): every update, or what the cache lets through at flush;
    ``on_window_close()``: one final result per window once stream time passes its end + grace."""

    type: StrategyType

    @staticmethod
    def on_window_update() -> EmitStrategy:
        return EmitStrategy(StrategyType.ON_WINDOW_UPDATE)

    @staticmethod
    def on_window_close() -> EmitStrategy:
        return EmitStrategy(StrategyType.ON_WINDOW_CLOSE)
