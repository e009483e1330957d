"""StreamsConfig: Kafka Streams' configuration keys, defaults and validation.

Every key of Kafka Streams 4.x's StreamsConfig is accepted: a key strom uses is validated and works; a
key without meaning on Spark (thread counts, standbys, rebalancing, JMX metrics) is accepted and logged
once at INFO with the reason (``IGNORED``). Unknown keys are rejected with a did-you-mean hint. Kafka
client keys pass through with Kafka's prefixes (``producer.``, ``consumer.``, ``main.consumer.``,
``restore.consumer.``, ``admin.``; ``global.consumer.`` is accepted without effect), ``topic.`` keys
configure the internal topics.
docs/configuration.md lists every key with its default and status.
"""

from __future__ import annotations

import importlib
import logging
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from strom.errors import ConfigError

__all__ = [
    "ACCEPTABLE_RECOVERY_LAG",
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
    "EXECUTION_MODE",
    "HANDLER_RESPONSES",
    "MAX_OFFSETS_PER_TRIGGER",
    "METRICS_HOST",
    "METRICS_PORT",
    "MICROBATCH",
    "NUM_STANDBY_REPLICAS",
    "NUM_STREAM_THREADS",
    "PROCESSING_EXCEPTION_HANDLER",
    "PROCESSING_GUARANTEE",
    "QUERY_HTTP_HOST",
    "QUERY_HTTP_PORT",
    "REALTIME",
    "REALTIME_BATCH_DURATION_MS",
    "STATESTORE_CACHE_MAX_BYTES",
    "STATE_DIR",
    "TASK_TIMEOUT_MS",
    "TOPOLOGY_OPTIMIZATION",
    "UNCAUGHT_EXCEPTION_HANDLER",
    "StreamsConfig",
    "optimization_rules",
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
DSL_STORE_SUPPLIERS_CLASS = "dsl.store.suppliers.class"
DESERIALIZATION_EXCEPTION_HANDLER = "deserialization.exception.handler"
PRODUCTION_EXCEPTION_HANDLER = "production.exception.handler"
REPLICATION_FACTOR = "replication.factor"
TASK_TIMEOUT_MS = "task.timeout.ms"
WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION_MS = "windowstore.changelog.additional.retention.ms"
TOPIC_PREFIX = "topic."
ROCKSDB_CONFIG_SETTER = "rocksdb.config.setter"
TOPOLOGY_OPTIMIZATION = "topology.optimization"
NO_OPTIMIZATION = "none"
OPTIMIZE = "all"
REUSE_KTABLE_SOURCE_TOPICS = "reuse.ktable.source.topics"
MERGE_REPARTITION_TOPICS = "merge.repartition.topics"
SINGLE_STORE_SELF_JOIN = "single.store.self.join"
OPTIMIZATION_RULES = (REUSE_KTABLE_SOURCE_TOPICS, MERGE_REPARTITION_TOPICS, SINGLE_STORE_SELF_JOIN)

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE_V2 = "exactly_once_v2"

# Keys of the Spark runtime (strom.spark), defined here with the others: every command and process
# validates a config alike, whatever it imported before (`strom run` checks props before Spark loads).
EXECUTION_MODE = "execution.mode"
REALTIME, MICROBATCH = "realtime", "microbatch"
REALTIME_BATCH_DURATION_MS = "realtime.batch.duration.ms"
MAX_OFFSETS_PER_TRIGGER = "max.offsets.per.trigger"
NUM_STREAM_THREADS = "num.stream.threads"
NUM_STANDBY_REPLICAS = "num.standby.replicas"
ACCEPTABLE_RECOVERY_LAG = "acceptable.recovery.lag"
METRICS_PORT = "metrics.prometheus.port"
METRICS_HOST = "metrics.prometheus.host"
QUERY_HTTP_PORT = "query.http.port"
QUERY_HTTP_HOST = "query.http.host"
UNCAUGHT_EXCEPTION_HANDLER = "strom.uncaught.exception.handler"
HANDLER_RESPONSES = ("REPLACE_THREAD", "SHUTDOWN_CLIENT", "SHUTDOWN_APPLICATION")

_CONSUMER_ROLES = ("main.consumer.", "restore.consumer.")
_CLIENT_PREFIXES = ("producer.", "consumer.", *_CONSUMER_ROLES, "admin.", TOPIC_PREFIX, "ssl.", "sasl.")
_CLIENT_KEYS = ("security.protocol", "client.id")
# Kafka's common client keys, given un-prefixed to every client (Kafka's name -> librdkafka's).
_COMMON_CLIENT_KEYS = {
    "retry.backoff.ms": "retry.backoff.ms",
    "reconnect.backoff.ms": "reconnect.backoff.ms",
    "reconnect.backoff.max.ms": "reconnect.backoff.max.ms",
    "metadata.max.age.ms": "metadata.max.age.ms",
    "connections.max.idle.ms": "connections.max.idle.ms",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
}
_PRODUCER_ONLY_KEYS = ("request.timeout.ms",)  # a producer key in librdkafka (the others have none)


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


def optimization_rules(value: str) -> frozenset[str]:
    """Kafka's ``verifyTopologyOptimizationConfigs``: ``none``, ``all`` (every rule) or a comma-separated
    list of rules, as the set of rules they mean."""
    names = [name.strip() for name in str(value).split(",")]
    if names in ([NO_OPTIMIZATION], [OPTIMIZE]):
        return frozenset() if names == [NO_OPTIMIZATION] else frozenset(OPTIMIZATION_RULES)
    unknown = [name for name in names if name not in OPTIMIZATION_RULES]
    if unknown:
        raise ConfigError.bad_value(TOPOLOGY_OPTIMIZATION, value, f"{NO_OPTIMIZATION!r}, {OPTIMIZE!r} or a "
                                    f"comma-separated list of {', '.join(OPTIMIZATION_RULES)}")
    return frozenset(names)


def _optimization(key: str, value: Any) -> str:
    optimization_rules(value)
    return str(value)


def _replication_factor(key: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if isinstance(value, bool) or number == 0 or number < -1:
        raise ConfigError.bad_value(key, value, "a positive integer, or -1 for the broker's "
                                    "default.replication.factor")
    return number


def _dsl_store_suppliers(key: str, value: Any) -> str:
    """Kafka's ``BuiltInDslStoreSuppliers`` classes, by name, to the ``default.dsl.store`` they mean."""
    name = getattr(value, "__name__", str(value))
    if name.endswith("InMemoryDslStoreSuppliers"):
        return "in_memory"
    if name.endswith("RocksDBDslStoreSuppliers"):
        return "rocksDB"
    raise ConfigError.bad_value(key, value, "BuiltInDslStoreSuppliers.RocksDBDslStoreSuppliers or "
                                "BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers")


def _anything(key: str, value: Any) -> Any:
    return value


def _positive_int(key: str, value: Any) -> int:
    number = _non_negative_int(key, value) if not isinstance(value, bool) else 0
    if number <= 0:
        raise ConfigError.bad_value(key, value, "a positive integer")
    return number


def _optional_positive_int(key: str, value: Any) -> int | None:
    return None if value is None else _positive_int(key, value)


def _execution_mode(key: str, value: Any) -> str:
    if value not in (REALTIME, MICROBATCH):
        raise ConfigError.bad_value(key, value, f"{REALTIME!r} (long-running stream threads) or "
                                    f"{MICROBATCH!r} (one Spark micro-batch per commit)")
    return value


def _port(key: str, value: Any) -> int | None:
    if value is None:
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not 0 <= port <= 65535:
        raise ConfigError.bad_value(key, value, "a TCP port (0 picks a free one)")
    return port


def _handler_setting(key: str, value: Any) -> Any:
    """A response name (any case), a callable, or a dotted path resolved to the function it names."""
    if value is None or callable(value):
        return value
    text = str(value).strip()
    if text.upper() in HANDLER_RESPONSES:
        return text.upper()
    module_name, _, attr = text.rpartition(".")
    if not module_name or not attr.isidentifier():
        raise ConfigError.bad_value(key, value, f"one of {', '.join(HANDLER_RESPONSES)} or a dotted path to "
                                    "a function, e.g. myapp.handlers.on_error")
    try:
        handler = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{key}={text}: cannot load {attr} from {module_name} ({exc}). Name an importable "
                          "function handler(exception) returning a StreamThreadExceptionResponse.") from exc
    if not callable(handler):
        raise ConfigError(f"{key}={text} is not a function; name handler(exception) returning a "
                          "StreamThreadExceptionResponse.")
    return handler


_Validator = Callable[[str, Any], Any]

# key -> (default, validator). None default = not set.
DEFINITIONS: dict[str, tuple[Any, _Validator]] = {
    APPLICATION_ID: (None, _application_id),
    BOOTSTRAP_SERVERS: (None, _text),
    PROCESSING_GUARANTEE: (AT_LEAST_ONCE, _guarantee),
    COMMIT_INTERVAL_MS: (30_000, _non_negative_int),
    TASK_TIMEOUT_MS: (300_000, _non_negative_int),
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
    TOPOLOGY_OPTIMIZATION: (NO_OPTIMIZATION, _optimization),
    REPLICATION_FACTOR: (-1, _replication_factor),
    ROCKSDB_CONFIG_SETTER: (None, _anything),
    WINDOWSTORE_CHANGELOG_ADDITIONAL_RETENTION_MS: (24 * 60 * 60 * 1000, _non_negative_int),
    "security.protocol": (None, _text),
    "request.timeout.ms": (None, _non_negative_int),
    **{key: (None, _non_negative_int) for key in _COMMON_CLIENT_KEYS},
    EXECUTION_MODE: (REALTIME, _execution_mode),
    REALTIME_BATCH_DURATION_MS: (300_000, _positive_int),
    MAX_OFFSETS_PER_TRIGGER: (100_000, _positive_int),
    NUM_STREAM_THREADS: (None, _optional_positive_int),
    NUM_STANDBY_REPLICAS: (0, _non_negative_int),
    ACCEPTABLE_RECOVERY_LAG: (10_000, _non_negative_int),
    METRICS_PORT: (None, _port),
    METRICS_HOST: ("127.0.0.1", _text),
    QUERY_HTTP_PORT: (None, _port),
    QUERY_HTTP_HOST: ("127.0.0.1", _text),
    UNCAUGHT_EXCEPTION_HANDLER: (None, _handler_setting),
}

# Kafka 4's names for keys strom defines under their older name: new name -> (old name, validator).
ALIASES: dict[str, tuple[str, _Validator]] = {
    DESERIALIZATION_EXCEPTION_HANDLER: (DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER, _anything),
    PRODUCTION_EXCEPTION_HANDLER: (DEFAULT_PRODUCTION_EXCEPTION_HANDLER, _anything),
    DSL_STORE_SUPPLIERS_CLASS: (DEFAULT_DSL_STORE, _dsl_store_suppliers),
}


_SPARK_PLACES_TASKS = "Spark's scheduler places stream tasks on executors; there is no group rebalance"
_METRICS = "strom's metrics are its own (a Prometheus endpoint, docs/deploy.md), not Kafka's metrics registry"

# Kafka Streams 4.x keys without meaning on Spark: accepted, logged once at INFO with the reason (values
# are not checked).
IGNORED: dict[str, str] = {
    "max.warmup.replicas": "there are no warm-up tasks; a moved task restores from its changelog",
    "probing.rebalance.interval.ms": _SPARK_PLACES_TASKS,
    "task.assignor.class": _SPARK_PLACES_TASKS,
    "rack.aware.assignment.strategy": _SPARK_PLACES_TASKS,
    "rack.aware.assignment.tags": _SPARK_PLACES_TASKS,
    "rack.aware.assignment.traffic_cost": _SPARK_PLACES_TASKS,
    "rack.aware.assignment.non_overlap_cost": _SPARK_PLACES_TASKS,
    "group.protocol": _SPARK_PLACES_TASKS,
    "state.cleanup.delay.ms": "tasks do not migrate between instances by rebalance; SparkStreams.clean_up() "
                              "deletes local state",
    "application.server": "interactive queries are answered by the driver (SparkStreams.store), which reads "
                          "every task's changelog; there are no instance endpoints to discover",
    "max.task.idle.ms": "a task processes what each micro-batch holds for all its partitions",
    "buffered.records.per.partition": "the runtime feeds each task whole micro-batches",
    "poll.ms": "the runtime reads each task's input on its own schedule (commit.interval.ms)",
    "upgrade.from": "there is no earlier strom rebalance protocol to upgrade from",
    "default.client.supplier": "every Kafka client is librdkafka's, built by strom.kafka",
    "repartition.purge.interval.ms": "repartition records are not purged by the application; the topic's "
                                      "retention removes them",
    "log.summary.interval.ms": "progress is in SparkStreams.progress, the Spark UI and the metrics endpoint",
    "ensure.explicit.internal.resource.naming": "not enforced: internal topic and store names are derived "
                                                "as Kafka Streams derives them",
    "errors.dead.letter.queue.topic.name": "not implemented: exception handlers log and continue or fail",
    "window.size.ms": "used by Kafka's windowed deserializer in console tools only",
    "windowed.inner.class.serde": "used by Kafka's windowed deserializer in console tools only",
    "default.list.key.serde.inner": "strom has no ListSerde; give list serdes in Consumed/Produced",
    "default.list.key.serde.type": "strom has no ListSerde; give list serdes in Consumed/Produced",
    "default.list.value.serde.inner": "strom has no ListSerde; give list serdes in Consumed/Produced",
    "default.list.value.serde.type": "strom has no ListSerde; give list serdes in Consumed/Produced",
    "built.in.metrics.version": _METRICS,
    "metric.reporters": _METRICS,
    "metrics.num.samples": _METRICS,
    "metrics.recording.level": _METRICS,
    "metrics.sample.window.ms": _METRICS,
    "enable.metrics.push": _METRICS,
}
_IGNORED_PREFIXES = {
    "client.tag.": _SPARK_PLACES_TASKS,
    "global.consumer.": "global tables are read by the tasks' own consumers; use consumer. or main.consumer.",
}
_reported: set[str] = set()


def _report_ignored(key: str, reason: str) -> None:
    """Logs an accepted key without effect once per process (every task builds a StreamsConfig)."""
    if key not in _reported:
        _reported.add(key)
        log.info("Configuration %r has no effect on strom: %s.", key, reason)


def _ignored_reason(key: str) -> str | None:
    if key in IGNORED:
        return IGNORED[key]
    return next((reason for prefix, reason in _IGNORED_PREFIXES.items() if key.startswith(prefix)), None)


class StreamsConfig:
    """Validated configuration of a streams application. Read values with ``config[key]``."""

    def __init__(self, props: Mapping[str, Any] | StreamsConfig | None = None) -> None:
        if isinstance(props, StreamsConfig):
            props = props.originals
        self.originals: dict[str, Any] = dict(props or {})
        self._values: dict[str, Any] = {}
        aliased: dict[str, Any] = {}
        for key, value in self.originals.items():
            if key in DEFINITIONS:
                self._values[key] = DEFINITIONS[key][1](key, value)
            elif key in ALIASES:
                old, validator = ALIASES[key]  # Kafka 4's name wins over the older one
                aliased[old] = DEFINITIONS[old][1](old, validator(key, value))
            elif (reason := _ignored_reason(key)) is not None:
                _report_ignored(key, reason)
            elif not (key.startswith(_CLIENT_PREFIXES) or key in _CLIENT_KEYS):
                raise ConfigError.unknown_key(key, [*DEFINITIONS, *ALIASES, *IGNORED])
        self._values.update(aliased)
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
        raise ConfigError.unknown_key(key, [*DEFINITIONS, *ALIASES, *IGNORED])

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
        """Keys for one Kafka client, as Kafka Streams layers them: the common client keys (security,
        backoffs, socket buffers; ``request.timeout.ms`` for producers), then ``consumer.`` keys for
        every consumer role, then ``<prefix>key`` (``producer.``, ``consumer.``, ``main.consumer.``,
        ``restore.consumer.``, ``admin.``)."""
        originals = self.originals
        out = {k: v for k, v in originals.items() if k in _CLIENT_KEYS or k.startswith(("ssl.", "sasl."))}
        out.update({rd: originals[k] for k, rd in _COMMON_CLIENT_KEYS.items() if k in originals})
        if prefix == "producer.":
            out.update({k: originals[k] for k in _PRODUCER_ONLY_KEYS if k in originals})
        layers = ("consumer.", prefix) if prefix in _CONSUMER_ROLES else (prefix,)
        for layer in layers:
            out.update({k[len(layer):]: v for k, v in originals.items() if k.startswith(layer)})
        return out

    def topic_configs(self) -> dict[str, str]:
        """``topic.``-prefixed keys without the prefix: configs of every internal topic (repartition and
        changelog) strom creates, e.g. ``topic.min.insync.replicas``."""
        prefixed = self.originals.items()
        return {k[len(TOPIC_PREFIX):]: str(v) for k, v in prefixed if k.startswith(TOPIC_PREFIX)}

    def as_dict(self) -> dict[str, Any]:
        return {key: self[key] for key in DEFINITIONS} | {
            k: v for k, v in self.originals.items() if k not in DEFINITIONS
        }
