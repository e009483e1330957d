"""Parses the options of the "strom" data source, spelled as Spark's built-in Kafka connector's.

Spark hands options over case-insensitively (keys lower-cased); every error names the option as
the user spells it, so a typo is found at ``load()`` / ``start()`` time, not inside a task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from strom.errors import ConfigError
from strom.kafka import clients
from strom.kafka.security import security_settings

__all__ = [
    "DELIVERY_GUARANTEES",
    "EARLIEST",
    "KAFKA_PREFIX",
    "LATEST",
    "SINK_OPTIONS",
    "SOURCE_OPTIONS",
    "OffsetSpec",
    "SinkOptions",
    "SourceOptions",
    "Subscription",
    "TopicPartitionOffsets",
    "WriteVersion",
    "parse_offset_spec",
    "sink_options",
    "source_options",
]

EARLIEST = -2
LATEST = -1

KAFKA_PREFIX = "kafka."
_SPARK_OWNED = ("checkpointlocation", "path")
_CLIENT_OWNED = ("group.id", "enable.auto.commit", "auto.offset.reset", "transactional.id",
                 "key.deserializer", "value.deserializer", "key.serializer", "value.serializer")

SOURCE_OPTIONS = ("kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign",
                  "startingOffsets", "endingOffsets", "maxOffsetsPerTrigger", "minPartitions",
                  "failOnDataLoss", "includeHeaders", "kafka.isolation.level")
SINK_OPTIONS = ("kafka.bootstrap.servers", "topic", "delivery.guarantee", "txnAppId", "txnVersion")
DELIVERY_GUARANTEES = ("at_least_once", "exactly_once")

TopicPartitionOffsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class Subscription:
    """Which topic partitions to read: named topics, a regex over topic names, or fixed partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern={self.pattern!r}"
        if self.assigned:
            return f"assign={sorted(self.assigned)}"
        return f"subscribe={','.join(self.topics)!r}"


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest`` or explicit offsets per partition (-2 earliest, -1 latest)."""

    default: int
    per_partition: TopicPartitionOffsets = field(default_factory=dict)


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    client_config: dict[str, str]
    min_partitions: int | None = None

    @property
    def read_committed(self) -> bool:
        return self.client_config.get("isolation.level", "read_committed") == "read_committed"


@dataclass(frozen=True)
class WriteVersion:
    """``txnAppId`` and ``txnVersion`` of a ``df.write``: a write of a version at or below the
    last one written under the same app id writes nothing (as Delta Lake's options of the same
    names), so a foreachBatch that Spark replays after a failure writes its batch once."""

    app_id: str
    version: int


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    exactly_once: bool
    client_config: dict[str, str]
    write_version: WriteVersion | None = None


def _lookup(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name.lower())
    return None if value is None else str(value)


def _client_config(options: Mapping[str, str], build: Callable[..., Any]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix, checked by librdkafka on the driver."""
    config, named = {}, {}
    for key, value in options.items():
        if not key.lower().startswith(KAFKA_PREFIX) or key.lower() == "kafka.bootstrap.servers":
            continue
        client_key = key[len(KAFKA_PREFIX):]
        if client_key.lower() in _CLIENT_OWNED:
            raise ConfigError(f"Option {key!r} is not supported: the strom connector manages "
                              f"{client_key!r} itself. Remove the option.")
        config[client_key], named[client_key] = str(value), key
    _check_client_settings(config, named, build)
    return config


def _check_client_settings(config: dict[str, str], named: dict[str, str], build: Callable[..., Any]) -> None:
    """librdkafka checks names and values when a client is made; one without brokers costs well
    under a millisecond, and a typo then fails load() or start() instead of a Spark task. Each setting
    is checked alone, to name the option at fault, but the security settings together
    (``security.protocol=SASL_SSL`` alone is refused: its default mechanism, GSSAPI, is not built in)."""
    security = security_settings(config)
    groups = [{key: value} for key, value in config.items() if key not in security]
    for settings in [*groups, security] if security else groups:
        try:
            build("", **settings)
        except ConfigError as exc:
            cause = exc.__cause__
            detail = cause.args[0].str() if isinstance(cause, KafkaException) else str(cause or exc)
            option = ", ".join(named[key] for key in settings)
            raise ConfigError(f"Option {option!r} is not a valid Kafka client setting: {detail}. The "
                              "part after 'kafka.' is a librdkafka configuration key (see "
                              "CONFIGURATION.md of librdkafka).") from exc


def _check_known(options: Mapping[str, str], known: tuple[str, ...]) -> None:
    lowered = {k.lower(): k for k in known}
    for key in options:
        if key.lower().startswith(KAFKA_PREFIX) or key.lower() in _SPARK_OWNED:
            continue
        if key.lower() not in lowered:
            raise ConfigError.unknown_key(key, known)


def _bootstrap(options: Mapping[str, str]) -> str:
    servers = _lookup(options, "kafka.bootstrap.servers")
    if not servers:
        raise ConfigError("Option 'kafka.bootstrap.servers' is required: set it to the broker "
                          "address, e.g. .option('kafka.bootstrap.servers', 'localhost:9092').")
    return servers


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _lookup(options, name)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ConfigError.bad_value(name, raw, "true or false")
    return raw.strip().lower() == "true"


def _json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"Option {name!r} is not valid JSON ({exc.msg} at position {exc.pos}): "
                          f"{raw!r}. Expected for example {{\"topicA\":{{\"0\":23,\"1\":-2}}}}.") from exc


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = {name: _lookup(options, name) for name in ("subscribe", "subscribePattern", "assign")}
    chosen = [name for name, value in given.items() if value is not None]
    if len(chosen) != 1:
        which = "none" if not chosen else " and ".join(chosen)
        raise ConfigError(f"Set exactly one of the options 'subscribe', 'subscribePattern' or "
                          f"'assign' (got {which}).")
    name, raw = chosen[0], given[chosen[0]]
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise ConfigError.bad_value("subscribe", raw, "a comma-separated list of topic names")
        return Subscription(topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise ConfigError.bad_value("subscribePattern", raw, f"a regular expression ({exc})") from exc
        return Subscription(pattern=raw)
    parsed = _json("assign", raw)
    if not isinstance(parsed, dict) or not all(
        isinstance(parts, list) and all(isinstance(p, int) for p in parts) for parts in parsed.values()
    ):
        raise ConfigError.bad_value("assign", raw, 'JSON like {"topicA":[0,1],"topicB":[2,4]}')
    assigned = tuple(sorted((topic, p) for topic, parts in parsed.items() for p in parts))
    if not assigned:
        raise ConfigError.bad_value("assign", raw, "at least one topic partition")
    return Subscription(assigned=assigned)


def parse_offset_spec(name: str, raw: str | None, default: int, allowed: tuple[int, ...]) -> OffsetSpec:
    """Parses ``earliest`` / ``latest`` / ``{"topic":{"0":23}}``; ``allowed`` lists usable symbols."""
    if raw is None:
        return OffsetSpec(default)
    words = {"earliest": EARLIEST, "latest": LATEST}
    stripped = raw.strip()
    if stripped.lower() in words:
        symbol = words[stripped.lower()]
        if symbol not in allowed:
            raise ConfigError.bad_value(name, raw, _expected(allowed))
        return OffsetSpec(symbol)
    parsed = _json(name, stripped)
    per_partition: TopicPartitionOffsets = {}
    if not isinstance(parsed, dict):
        raise ConfigError.bad_value(name, raw, _expected(allowed))
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise ConfigError.bad_value(name, raw, _expected(allowed))
        for partition, offset in partitions.items():
            if not str(partition).lstrip("-").isdigit() or not isinstance(offset, int):
                raise ConfigError.bad_value(name, raw, _expected(allowed))
            if offset < 0 and offset not in allowed:
                raise ConfigError(f"Option {name!r}: offset {offset} for {topic}-{partition} is not "
                                  f"allowed here; use {_expected(allowed)}.")
            per_partition[(topic, int(partition))] = offset
    return OffsetSpec(default, per_partition)


def _expected(allowed: tuple[int, ...]) -> str:
    words = [w for w, v in (("earliest", EARLIEST), ("latest", LATEST)) if v in allowed]
    codes = " or ".join(f"{v} for {w}" for w, v in (("earliest", EARLIEST), ("latest", LATEST))
                        if v in allowed)
    return (f"{' or '.join(repr(w) for w in words)}, or JSON like "
            f'{{"topicA":{{"0":23,"1":{allowed[0]}}}}} (offsets >= 0, {codes})')


def source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Validates reader options; batch reads default to earliest..latest, streams start at latest."""
    _check_known(options, SOURCE_OPTIONS)
    if streaming and _lookup(options, "endingOffsets") is not None:
        raise ConfigError("Option 'endingOffsets' is only for batch reads (spark.read); a streaming "
                          "query reads on. Use trigger(availableNow=True) to stop at the latest data.")
    if not streaming and _lookup(options, "maxOffsetsPerTrigger") is not None:
        raise ConfigError("Option 'maxOffsetsPerTrigger' is only for streaming queries "
                          "(spark.readStream); remove it from the batch read.")
    starting_allowed = (EARLIEST, LATEST) if streaming else (EARLIEST,)
    starting = parse_offset_spec("startingOffsets", _lookup(options, "startingOffsets"),
                                 LATEST if streaming else EARLIEST, starting_allowed)
    ending = parse_offset_spec("endingOffsets", _lookup(options, "endingOffsets"), LATEST, (LATEST,))
    config = _client_config(options, clients.consumer)
    return SourceOptions(
        bootstrap_servers=_bootstrap(options),
        subscription=_subscription(options),
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        client_config=config,
        min_partitions=_positive_int(options, "minPartitions"),
    )


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = _lookup(options, name)
    if raw is None:
        return None
    if not raw.strip().isdigit() or int(raw) <= 0:
        raise ConfigError.bad_value(name, raw, "a positive whole number of records")
    return int(raw)


def sink_options(options: Mapping[str, str], streaming: bool) -> SinkOptions:
    """Validates writer options; txnAppId/txnVersion only for batch writes (df.write)."""
    _check_known(options, SINK_OPTIONS)
    guarantee = (_lookup(options, "delivery.guarantee") or "at_least_once").strip().lower()
    if guarantee not in DELIVERY_GUARANTEES:
        raise ConfigError.bad_value("delivery.guarantee", guarantee, " or ".join(DELIVERY_GUARANTEES))
    topic = _lookup(options, "topic")
    if topic is not None and not topic.strip():
        raise ConfigError("Option 'topic' is empty: name the topic to write to, or leave the "
                          "option out and give each row a 'topic' column.")
    return SinkOptions(
        bootstrap_servers=_bootstrap(options),
        topic=topic,
        exactly_once=guarantee == "exactly_once",
        client_config=_client_config(options, clients.producer),
        write_version=_write_version(options, streaming, guarantee == "exactly_once"),
    )


def _write_version(options: Mapping[str, str], streaming: bool, exactly_once: bool
                   ) -> WriteVersion | None:
    app_id, version = _lookup(options, "txnAppId"), _lookup(options, "txnVersion")
    if app_id is None and version is None:
        return None
    if streaming:
        raise ConfigError("Options 'txnAppId' and 'txnVersion' are for df.write (e.g. inside "
                          "foreachBatch); writeStream with delivery.guarantee=exactly_once already "
                          "writes each micro-batch once. Remove them.")
    if app_id is None or version is None or not app_id.strip():
        raise ConfigError("Options 'txnAppId' and 'txnVersion' go together: set both, e.g. a name "
                          "for the query and foreachBatch's batch id.")
    if not exactly_once:
        raise ConfigError("Options 'txnAppId' and 'txnVersion' need "
                          "delivery.guarantee=exactly_once: set it, or remove them.")
    if not version.strip().isdigit():
        raise ConfigError.bad_value("txnVersion", version, "a whole number >= 0 (e.g. the batch id)")
    return WriteVersion(app_id.strip(), int(version))
