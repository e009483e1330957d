"""Resolves the configured exception handlers (``strom.streams.errors``) and timestamp extractors
(``strom.streams.processor.timestamps``): a class name, a class, or an instance."""

from __future__ import annotations

from typing import Any

from strom.errors import ConfigError
from strom.streams.errors import (
    DefaultProductionExceptionHandler,
    LogAndContinueExceptionHandler,
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    LogAndFailExceptionHandler,
    LogAndFailProcessingExceptionHandler,
)
from strom.streams.processor.timestamps import (
    FailOnInvalidTimestamp,
    LogAndSkipOnInvalidTimestamp,
    UsePartitionTimeOnInvalidTimestamp,
    WallclockTimestampExtractor,
)

_NAMED = {
    cls.__name__: cls
    for cls in (
        LogAndContinueExceptionHandler,
        LogAndFailExceptionHandler,
        LogAndContinueProcessingExceptionHandler,
        LogAndFailProcessingExceptionHandler,
        DefaultProductionExceptionHandler,
        LogAndContinueProductionExceptionHandler,
        FailOnInvalidTimestamp,
        LogAndSkipOnInvalidTimestamp,
        UsePartitionTimeOnInvalidTimestamp,
        WallclockTimestampExtractor,
    )
}


def resolve(key: str, value: Any, method: str) -> Any:
    """An instance from a configured class name, class or instance; it must have ``method``."""
    if isinstance(value, str):
        short = value.rsplit(".", 1)[-1].rsplit("$", 1)[-1]
        if short not in _NAMED:
            raise ConfigError.bad_value(
                key,
                value,
                "one of " + ", ".join(sorted(_NAMED)) + " or a class/instance with a " + method + "() method",
            )
        value = _NAMED[short]
    if isinstance(value, type):
        value = value()
    if not callable(getattr(value, method, None)):
        raise ConfigError.bad_value(key, value, f"an object with a {method}() method")
    return value
