"""StreamsConfig: Kafka Streams' configuration keys, defaults and validation.

Unknown keys are rejected with a did-you-mean hint; Kafka client keys pass through with Kafka's prefixes
(``producer.``, ``consumer.``, ``admin.``, ...) or as plain security/client keys.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from strom.errors import ConfigError

__all__ = [
    "APPLICATION_ID",
    "AT_LEAST_ONCE",
    "AUTO_OFFSET_RESET",
    "BOOTSTRAP_SERVERS",
    "CACHE_MAX_BYTES_BUFFERING",
    "CLIENT_ID",
    "COMMIT_INTERVAL_MS",
    "DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER",
    "DEFAULT_DSL_STORE",
    "DEFAULT_KEY_SERDE",
    "DEFAULT_PRODUCTION_EXCEPTION_HANDLER",
    "DEFAULT_TIMESTAMP_EXTRACTOR",
    "DEFAULT_VALUE_SERDE",
    "EXACTLY_ONCE_V2",
    "PROCESSING_EXCEPTION_HANDLER",
    "PROCESSING_GUARANTEE",
    "STATESTORE_CACHE_MAX_BYTES",
    "STATE_DIR",
    "StreamsConfig",
]

log = logging.getLogger(__name__)

APPLICATION_ID = "application.id"
BOOTSTRAP_SERVERS = "bootstrap.servers"
PROCESSING_GUARANTEE = "processing.guarantee"
COMMIT_INTERVAL_MS = "commit.interval.ms"
STATESTORE_CACHE_MAX_BYTES = "statestore.cache.max.bytes"
CACHE_MAX_BYTES_BUFFERING = "cache.max.bytes.buffering"
STATE_DIR = "state.dir"
DEFAULT_KEY_SERDE = "default.key.serde"
DEFAULT_VALUE_SERDE = "default.value.serde"
DEFAULT_TIMESTAMP_EXTRACTOR = "default.timestamp.extractor"
DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER = "default.deserialization.exception.handler"
DEFAULT_PRODUCTION_EXCEPTION_HANDLER = "default.production.exception.handler"
PROCESSING_EXCEPTION_HANDLER = "processing.exception.handler"
CLIENT_ID = "client.id"
AUTO_OFFSET_RESET = "auto.offset.reset"
DEFAULT_DSL_STORE = "default.dsl.store"
ROCKSDB_CONFIG_SETTER = "rocksdb.config.setter"

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE_V2 = "exactly_once_v2"

_CLIENT_PREFIXES = (
    "producer.",
    "consumer.",
    "main.consumer.",
    "restore.consumer.",
    "global.consumer.",
    "admin.",
    "topic.",
    "ssl.",
    "sasl.",
)
_CLIENT_KEYS = ("security.protocol", "client.id")


def _non_negative_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError.bad_value(key, value, "a non-negative integer")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError.bad_value(key, value, "a non-negative integer") from None
    if number < 0:
        raise ConfigError.bad_value(key, value, "a non-negative integer")
    return number


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError.bad_value(key, value, "a non-empty string")
    return value


def _application_id(key: str, value: Any) -> str:
    text = _text(key, value)
    if not all(c.isalnum() or c in "._-" for c in text):
        raise ConfigError.bad_value(key, value, "letters, digits, '.', '_' or '-' (it prefixes topic names)")
    return text


def _guarantee(key: str, value: Any) -> str:
    if value == "exactly_once":
        raise ConfigError.bad_value(
            key,
            value,
            f"{AT_LEAST_ONCE!r} or {EXACTLY_ONCE_V2!r} "
            "(exactly_once was removed in Kafka 4; use exactly_once_v2)",
        )
    if value not in (AT_LEAST_ONCE, EXACTLY_ONCE_V2):
        raise ConfigError.bad_value(key, value, f"{AT_LEAST_ONCE!r} or {EXACTLY_ONCE_V2!r}")
    return value


def _offset_reset(key: str, value: Any) -> str:
    if value not in ("earliest", "latest"):
        raise ConfigError.bad_value(key, value, "'earliest' or 'latest' (where sources without a committed "
                                    "offset start)")
    return value


def _dsl_store(key: str, value: Any) -> str:
    if value not in ("rocksDB", "in_memory"):
        raise ConfigError.bad_value(key, value, "'rocksDB' or 'in_memory' (the store DSL operators get when "
                                    "their Materialized names none)")
    return value


def _anything(key: str, value: Any) -> Any:
    return value


_Validator = Callable[[str, Any], Any]

# key -> (default, validator). None default = not set.
DEFINITIONS: dict[str, tuple[Any, _Validator]] = {
    APPLICATION_ID: (None, _application_id),
    BOOTSTRAP_SERVERS: (None, _text),
    PROCESSING_GUARANTEE: (AT_LEAST_ONCE, _guarantee),
    COMMIT_INTERVAL_MS: (30_000, _non_negative_int),
    STATESTORE_CACHE_MAX_BYTES: (10 * 1024 * 1024, _non_negative_int),
    CACHE_MAX_BYTES_BUFFERING: (None, _non_negative_int),
    STATE_DIR: (str(Path(tempfile.gettempdir()) / "strom-streams"), _text),
    DEFAULT_KEY_SERDE: (None, _anything),
    DEFAULT_VALUE_SERDE: (None, _anything),
    DEFAULT_TIMESTAMP_EXTRACTOR: (None, _anything),
    DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER: ("LogAndFailExceptionHandler", _anything),
    DEFAULT_PRODUCTION_EXCEPTION_HANDLER: ("DefaultProductionExceptionHandler", _anything),
    PROCESSING_EXCEPTION_HANDLER: ("LogAndFailProcessingExceptionHandler", _anything),
    CLIENT_ID: ("", _anything),
    AUTO_OFFSET_RESET: ("earliest", _offset_reset),
    DEFAULT_DSL_STORE: ("rocksDB", _dsl_store),
    ROCKSDB_CONFIG_SETTER: (None, _anything),
}


# Kafka Streams keys strom accepts but does not use: setting one logs why (values are not checked).
IGNORED: dict[str, str] = {
    "num.stream.threads": "Spark's executors and task slots run the stream tasks",
    "num.standby.replicas": "there are no standby tasks; a moved task restores from its changelog",
    "max.task.idle.ms": "a task processes what each micro-batch holds for all its partitions",
    "buffered.records.per.partition": "the runtime feeds each task whole micro-batches",
    "replication.factor": "internal topics are created by the runtime with its own settings",
    "topology.optimization": "topologies are run as built",
}


def register(key: str, default: Any, validator: _Validator = _anything) -> None:
    """Lets another strom layer (the Spark runtime, tasks) declare a key it reads from the same config."""
    DEFINITIONS.setdefault(key, (default, validator))


class StreamsConfig:
    """Validated configuration of a streams application. Read values with ``config[key]``."""

    def __init__(self, props: Mapping[str, Any] | StreamsConfig | None = None) -> None:
        if isinstance(props, StreamsConfig):
            props = props.originals
        self.originals: dict[str, Any] = dict(props or {})
        self._values: dict[str, Any] = {}
        for key, value in self.originals.items():
            if key in DEFINITIONS:
                self._values[key] = DEFINITIONS[key][1](key, value)
            elif key in IGNORED:
                log.warning("Configuration %r is ignored by strom: %s.", key, IGNORED[key])
            elif not (key.startswith(_CLIENT_PREFIXES) or key in _CLIENT_KEYS):
                raise ConfigError.unknown_key(key, list(DEFINITIONS))
        if APPLICATION_ID not in self._values:
            raise ConfigError(
                f"Missing required configuration {APPLICATION_ID!r}: it names the consumer "
                "group, the internal topics and the state directory. Set e.g. "
                "{'application.id': 'my-app'}."
            )
        if CACHE_MAX_BYTES_BUFFERING in self._values and STATESTORE_CACHE_MAX_BYTES not in self._values:
            self._values[STATESTORE_CACHE_MAX_BYTES] = self._values[CACHE_MAX_BYTES_BUFFERING]
        if COMMIT_INTERVAL_MS not in self._values and self[PROCESSING_GUARANTEE] == EXACTLY_ONCE_V2:
            self._values[COMMIT_INTERVAL_MS] = 100

    def __getitem__(self, key: str) -> Any:
        if key in self._values:
            return self._values[key]
        if key in DEFINITIONS:
            return DEFINITIONS[key][0]
        if key in self.originals:
            return self.originals[key]
        raise ConfigError.unknown_key(key, list(DEFINITIONS))

    def get(self, key: str, default: Any = None) -> Any:
        value = self[key] if key in DEFINITIONS or key in self.originals else None
        return default if value is None else value

    @property
    def application_id(self) -> str:
        return self[APPLICATION_ID]

    @property
    def exactly_once(self) -> bool:
        return self[PROCESSING_GUARANTEE] == EXACTLY_ONCE_V2

    def client_props(self, prefix: str) -> dict[str, Any]:
        """Keys for one Kafka client: ``<prefix>key`` overrides, plus plain security keys."""
        out = {
            k: v for k, v in self.originals.items() if k in _CLIENT_KEYS or k.startswith(("ssl.", "sasl."))
        }
        out.update({k[len(prefix) :]: v for k, v in self.originals.items() if k.startswith(prefix)})
        return out

    def as_dict(self) -> dict[str, Any]:
        return {key: self[key] for key in DEFINITIONS} | {
            k: v for k, v in self.originals.items() if k not in DEFINITIONS
        }
