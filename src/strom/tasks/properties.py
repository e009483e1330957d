"""Processor properties (Decaton's names) and dynamic values that can change while running.

A :class:`Property` holds the current value of one :class:`PropertyDefinition` and notifies listeners
when a :class:`PropertySupplier` (static, watched file, compacted topic) delivers a new value.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from strom.errors import ConfigError

__all__ = [
    "Listener", "ProcessorProperties", "ProcessorPropertiesView", "Property", "PropertyDefinition",
    "PropertySupplier", "StaticPropertySupplier",
]

log = logging.getLogger(__name__)


def _to_int(raw: Any) -> int:
    value = int(raw.strip()) if isinstance(raw, str) else raw
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(raw)
    return value


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    if not isinstance(raw, bool):
        raise ValueError(raw)
    return raw


def _to_str_tuple(raw: Any) -> tuple[str, ...]:
    """A list of strings; as text a JSON list or comma-separated names (files, topics, the CLI)."""
    if isinstance(raw, str):
        text = raw.strip()
        raw = json.loads(text) if text.startswith("[") else [k.strip() for k in text.split(",") if k.strip()]
    if not isinstance(raw, list | tuple) or not all(isinstance(k, str) for k in raw):
        raise ValueError(raw)
    return tuple(raw)


@dataclass(frozen=True)
class PropertyDefinition:
    """Name, default and validation of one property; ``parse`` turns text (CLI, files) into the value."""

    name: str
    default: Any
    expected: str
    check: Callable[[Any], bool]
    convert: Callable[[Any], Any] = _to_int

    def parse(self, raw: Any) -> Any:
        try:
            value = self.convert(raw)
        except (ValueError, TypeError) as exc:
            raise ConfigError.bad_value(self.name, raw, self.expected) from exc
        if not self.check(value):
            raise ConfigError.bad_value(self.name, raw, self.expected)
        return value


def _define(name: str, default: int, expected: str, check: Callable[[int], bool]) -> PropertyDefinition:
    return PropertyDefinition(name, default, expected, check)


class ProcessorProperties:
    """Every property a subscription understands, with Decaton's names and defaults; strom's own extensions
    are named ``strom.*``."""

    PARTITION_CONCURRENCY = _define(
        "decaton.partition.concurrency", 1, "an integer from 1 to 1024", lambda v: 1 <= v <= 1024)
    MAX_PENDING_RECORDS = _define(
        "decaton.max.pending.records", 10_000, "a positive integer", lambda v: v > 0)
    COMMIT_INTERVAL_MS = _define(
        "decaton.commit.interval.ms", 1000, "a non-negative integer (milliseconds)", lambda v: v >= 0)
    PROCESSING_RATE = _define(
        "decaton.processing.rate.per.partition", -1,
        "-1 (unlimited), 0 (paused) or tasks per second up to 1,000,000", lambda v: -1 <= v <= 1_000_000)
    DEFERRED_COMPLETE_TIMEOUT_MS = _define(
        "decaton.deferred.complete.timeout.ms", -1, "-1 (no timeout) or milliseconds", lambda v: v >= -1)
    IGNORE_KEYS = PropertyDefinition(
        "decaton.ignore.keys", (), "a list of keys (strings)", lambda v: True, _to_str_tuple)
    PER_KEY_QUOTA_PROCESSING_RATE = _define(
        "decaton.per.key.quota.processing.rate", -1,
        "-1 (unlimited) or tasks per second of one key up to 1,000,000", lambda v: -1 <= v <= 1_000_000)
    LEGACY_PARSE_FALLBACK_ENABLED = PropertyDefinition(
        "decaton.legacy.parse.fallback.enabled", False, "true or false", lambda v: True, _to_bool)
    RETRY_MAX_ATTEMPTS = _define(
        "strom.retry.max.attempts", 3, "-1 (no limit) or a non-negative integer", lambda v: v >= -1)
    """strom's extension: retries before a task goes to the dead letter topic (Decaton has no limit)."""
    GROUP_REBALANCE_TIMEOUT_MS = _define(
        "decaton.group.rebalance.timeout.ms", 1000, "a non-negative integer (milliseconds)", lambda v: v >= 0)
    SHUTDOWN_TIMEOUT_MS = _define(
        "decaton.processing.shutdown.timeout.ms", 10_000, "a non-negative integer (milliseconds)",
        lambda v: v >= 0)

    ALL: tuple[PropertyDefinition, ...] = (
        PARTITION_CONCURRENCY, MAX_PENDING_RECORDS, COMMIT_INTERVAL_MS, PROCESSING_RATE,
        DEFERRED_COMPLETE_TIMEOUT_MS, GROUP_REBALANCE_TIMEOUT_MS, SHUTDOWN_TIMEOUT_MS, IGNORE_KEYS,
        PER_KEY_QUOTA_PROCESSING_RATE, LEGACY_PARSE_FALLBACK_ENABLED, RETRY_MAX_ATTEMPTS,
    )
    BY_NAME: dict[str, PropertyDefinition] = {d.name: d for d in ALL}

    @classmethod
    def definition(cls, name: str) -> PropertyDefinition:
        try:
            return cls.BY_NAME[name]
        except KeyError:
            raise ConfigError.unknown_key(name, list(cls.BY_NAME)) from None


Listener = Callable[[Any, Any], None]


class Property:
    """The live value of one property; listeners get ``(old, new)`` on every change."""

    def __init__(self, definition: PropertyDefinition, value: Any | None = None) -> None:
        self.definition = definition
        self._value = definition.default if value is None else definition.parse(value)
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    @property
    def value(self) -> Any:
        return self._value

    def set(self, raw: Any) -> None:
        """Validates and applies a new value; an invalid one is logged and the old value kept."""
        try:
            new = self.definition.parse(raw)
        except ConfigError as exc:
            log.error("Ignoring update of %s: %s", self.definition.name, exc)
            return
        with self._lock:
            old, self._value = self._value, new
            listeners = list(self._listeners)
        if old != new:
            log.info("Property %s changed: %r -> %r", self.definition.name, old, new)
            for listener in listeners:
                listener(old, new)

    def listen(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)


class PropertySupplier(Protocol):
    """Provides the live :class:`Property` for a definition, or None to let the next supplier answer."""

    def provide(self, definition: PropertyDefinition) -> Property | None: ...


class StaticPropertySupplier:
    """Fixed values given in code or on the command line."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._properties = {}
        for name, raw in values.items():
            definition = ProcessorProperties.definition(name)
            self._properties[name] = Property(definition, raw)

    def provide(self, definition: PropertyDefinition) -> Property | None:
        return self._properties.get(definition.name)


class ProcessorPropertiesView:
    """The properties of one subscription: for each definition the first supplier that provides it wins."""

    def __init__(self, suppliers: Iterable[PropertySupplier] = ()) -> None:
        self._properties: dict[str, Property] = {}
        suppliers = list(suppliers)
        for definition in ProcessorProperties.ALL:
            found = next((p for s in suppliers if (p := s.provide(definition)) is not None), None)
            self._properties[definition.name] = found or Property(definition)

    def get(self, definition: PropertyDefinition) -> Property:
        return self._properties[definition.name]

    def value(self, definition: PropertyDefinition) -> Any:
        return self._properties[definition.name].value
