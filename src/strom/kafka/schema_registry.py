"""Schema Registry formats: Avro, Protobuf and JSON Schema in Confluent's wire format, as strom serdes.

The bytes are Confluent's (a magic byte 0, the schema id, then the payload; Protobuf adds its message
indexes), written and read by ``confluent_kafka.schema_registry``, so topics interoperate with Java's
``KafkaAvroSerializer``, ``KafkaProtobufSerializer`` and ``KafkaJsonSchemaSerializer``. Each serde takes the
configuration a Java serde's ``configure(config, isKey)`` takes:

- ``schema.registry.url`` (``mock://<scope>`` for confluent-kafka's in-process registry), and the
  registry client's settings as ``schema.registry.<setting>`` or ``basic.auth.user.info`` /
  ``basic.auth.credentials.source``;
- ``auto.register.schemas`` (default true), ``use.latest.version``, ``normalize.schemas``;
- ``key.subject.name.strategy`` / ``value.subject.name.strategy`` (or ``subject.name.strategy``):
  Confluent's class names (``io.confluent.kafka.serializers.subject.TopicNameStrategy``,
  ``RecordNameStrategy``, ``TopicRecordNameStrategy``), their short names, or a function
  ``(SerializationContext, record_name) -> subject``.

Clients are shared per registry configuration within a process (one connection pool and schema cache);
a serde pickles as its configuration (Spark ships serdes to executors), its client made again there.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from strom.errors import ConfigError, SerializationError
from strom.kafka.serdes import BaseSerde, Serde

__all__ = [
    "FORMATS",
    "URL",
    "GenericAvroSerde",
    "KafkaJsonSchemaSerde",
    "KafkaProtobufSerde",
    "SchemaRegistrySerde",
    "is_serde_setting",
    "registry_client",
    "serde_for_format",
    "split_config",
]

URL = "schema.registry.url"
_CLIENT_PREFIX = "schema.registry."
_AUTH_KEYS = ("basic.auth.user.info", "basic.auth.credentials.source")
_SERIALIZER_FLAGS = ("auto.register.schemas", "use.latest.version", "normalize.schemas")
_STRATEGIES: dict[str, Callable[..., Any]] = {
    "topicnamestrategy": topic_subject_name_strategy, "topic": topic_subject_name_strategy,
    "recordnamestrategy": record_subject_name_strategy, "record": record_subject_name_strategy,
    "topicrecordnamestrategy": topic_record_subject_name_strategy,
    "topic_record": topic_record_subject_name_strategy,
}
_STRATEGY_KEYS = ("subject.name.strategy", "key.subject.name.strategy", "value.subject.name.strategy")

_clients: dict[tuple[tuple[str, str], ...], SchemaRegistryClient] = {}
_clients_lock = threading.Lock()


def registry_client(client_config: Mapping[str, Any]) -> SchemaRegistryClient:
    """The process's client for this registry configuration (``url`` and the client's settings); a
    ``mock://`` URL gives confluent-kafka's in-process registry."""
    key = tuple(sorted((k, str(v)) for k, v in client_config.items()))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = SchemaRegistryClient.new_client(dict(client_config))
        return client


def _flag(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError.bad_value(key, value, "true or false")


def _strategy(key: str, value: Any) -> Callable[..., Any]:
    if callable(value):
        return value
    if isinstance(value, str):
        found = _STRATEGIES.get(value.rsplit(".", 1)[-1].lower())
        if found is not None:
            return found
    raise ConfigError.bad_value(key, value, "TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy "
                                "(or io.confluent.kafka.serializers.subject.<name>) or a function "
                                "(ctx, record_name) -> subject")


def is_serde_setting(key: str) -> bool:
    """A Java-style Schema Registry serde setting (what ``split_config`` takes), not a Kafka client's."""
    return (key == URL or key.startswith(_CLIENT_PREFIX) or key in _AUTH_KEYS or key in _SERIALIZER_FLAGS
            or key in _STRATEGY_KEYS)


def split_config(config: Mapping[str, Any], is_key: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(registry client settings, serializer settings) of a Java-style serde configuration."""
    client: dict[str, Any] = {}
    serde: dict[str, Any] = {}
    own_strategy = f"{'key' if is_key else 'value'}.subject.name.strategy"
    for key, value in config.items():
        if key == URL:
            client["url"] = str(value)
        elif key.startswith(_CLIENT_PREFIX):  # numbers given as text (properties, -X) made numbers
            number = isinstance(value, str) and value.isdigit()
            client[key.removeprefix(_CLIENT_PREFIX)] = int(value) if number else value
        elif key in _AUTH_KEYS:
            client[key] = value
        elif key in _SERIALIZER_FLAGS:
            serde[key] = _flag(key, value)
        elif key in _STRATEGY_KEYS:
            if key in ("subject.name.strategy", own_strategy):
                serde["subject.name.strategy"] = _strategy(key, value)
        else:
            raise ConfigError.unknown_key(key, [URL, *_AUTH_KEYS, *_SERIALIZER_FLAGS, *_STRATEGY_KEYS])
    if "url" not in client:
        raise ConfigError(f"A Schema Registry serde needs {URL!r} (e.g. 'http://registry:8081', or "
                          "'mock://name' for the in-process registry of tests).")
    return client, serde


class SchemaRegistrySerde(BaseSerde[Any]):
    """Base of the three formats: binds confluent-kafka's serializer and deserializer on first use."""

    name = "SchemaRegistry"

    def __init__(self, config: Mapping[str, Any], is_key: bool = False,
                 client: SchemaRegistryClient | None = None) -> None:
        self.config = dict(config)
        self.is_key = is_key
        self._client_config, self._serde_config = split_config(self.config, is_key)
        self._client = client
        self._field = MessageField.KEY if is_key else MessageField.VALUE
        self._to: Callable[[Any, SerializationContext], bytes] | None = None
        self._from: Callable[[bytes, SerializationContext], Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_client=None, _to=None, _from=None)
        return state

    @property
    def client(self) -> SchemaRegistryClient:
        if self._client is None:
            self._client = registry_client(self._client_config)
        return self._client

    def _serializer_config(self) -> dict[str, Any]:
        return dict(self._serde_config)

    def _deserializer_config(self) -> dict[str, Any]:
        return {k: v for k, v in self._serde_config.items()
                if k in ("use.latest.version", "subject.name.strategy")}

    def _make_serializer(self) -> Callable[[Any, SerializationContext], bytes]:
        raise NotImplementedError

    def _make_deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        raise NotImplementedError

    def _context(self, topic: str | None, headers: Any) -> SerializationContext:
        return SerializationContext(topic or "", self._field, headers)

    def serialize(self, topic: str | None, data: Any, headers: Any = None) -> bytes | None:
        if data is None:
            return None
        try:
            if self._to is None:
                self._to = self._make_serializer()
            return self._to(data, self._context(topic, headers))
        except ConfigError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"{self.name} cannot serialize {type(data).__name__} for topic {topic!r}: {exc}. Check the "
                f"value against the schema, and that the registry at {self._client_config['url']} is "
                "reachable (with auto.register.schemas=false the schema must be registered).") from exc

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> Any:
        if data is None:
            return None
        try:
            if self._from is None:
                self._from = self._make_deserializer()
            return self._from(bytes(data), self._context(topic, headers))
        except ConfigError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"{self.name} cannot deserialize {len(data)} bytes from topic {topic!r}: {exc}. The record "
                "must be in Confluent's wire format (magic byte 0 and a schema id the registry at "
                f"{self._client_config['url']} knows), written with a compatible schema.") from exc

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._client_config['url']!r}, is_key={self.is_key})"


class _SchemaTextSerde(SchemaRegistrySerde):
    """A format whose schema is text (Avro, JSON Schema): written with ``schema``, read with the writer's
    schema from the registry (or ``schema`` as the reader's, if given)."""

    serializer_class: Any
    deserializer_class: Any

    def __init__(self, config: Mapping[str, Any], schema: str | Mapping[str, Any] | None = None,
                 is_key: bool = False, client: SchemaRegistryClient | None = None) -> None:
        super().__init__(config, is_key, client)
        self.schema = schema if schema is None or isinstance(schema, str) else json.dumps(schema)

    def _make_serializer(self) -> Callable[[Any, SerializationContext], bytes]:
        return self.serializer_class(schema_registry_client=self.client, schema_str=self.schema,
                                     conf=self._serializer_config())

    def _make_deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        return self.deserializer_class(schema_registry_client=self.client, schema_str=self.schema,
                                       conf=self._deserializer_config())


class GenericAvroSerde(_SchemaTextSerde):
    """Avro records as dicts (Confluent's ``GenericAvroSerde``). ``schema`` (an Avro schema as JSON text or
    a dict) is what is written; without one, ``use.latest.version`` must be set. Reading uses the writer's
    schema from the registry, or ``schema`` as the reader schema if given."""

    name = "GenericAvro"
    serializer_class = AvroSerializer
    deserializer_class = AvroDeserializer


class KafkaJsonSchemaSerde(_SchemaTextSerde):
    """JSON documents validated against a JSON Schema (Confluent's ``KafkaJsonSchemaSerde``)."""

    name = "KafkaJsonSchema"
    serializer_class = JSONSerializer
    deserializer_class = JSONDeserializer


class KafkaProtobufSerde(SchemaRegistrySerde):
    """Protobuf messages of one generated class (Confluent's ``KafkaProtobufSerde``)."""

    name = "KafkaProtobuf"

    def __init__(self, message_type: type, config: Mapping[str, Any], is_key: bool = False,
                 client: SchemaRegistryClient | None = None) -> None:
        super().__init__(config, is_key, client)
        if not hasattr(message_type, "DESCRIPTOR"):
            raise ConfigError(f"KafkaProtobufSerde needs a generated protobuf message class, got "
                              f"{message_type!r}.")
        self.message_type = message_type

    def _make_serializer(self) -> Callable[[Any, SerializationContext], bytes]:
        return ProtobufSerializer(msg_type=self.message_type, schema_registry_client=self.client,
                                  conf=self._serializer_config())

    def _make_deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        return ProtobufDeserializer(message_type=self.message_type, schema_registry_client=self.client,
                                    conf=self._deserializer_config())


FORMATS = ("avro", "protobuf", "json_schema")


def serde_for_format(fmt: str, config: Mapping[str, Any], is_key: bool = False,
                     message_type: type | None = None, schema: str | None = None) -> Serde[Any]:
    """The serde of a format named on a command line or in options: ``avro`` and ``json_schema`` read with
    the writer's schema from the registry and write with ``schema``; ``protobuf`` needs the generated
    ``message_type``."""
    name = fmt.strip().lower().replace("-", "_")
    if name == "avro":
        return GenericAvroSerde(config, schema, is_key=is_key)
    if name in ("json_schema", "jsonschema"):
        return KafkaJsonSchemaSerde(config, schema, is_key=is_key)
    if name == "protobuf":
        if message_type is None:
            raise ConfigError("The protobuf format needs the generated message class to read into.")
        return KafkaProtobufSerde(message_type, config, is_key=is_key)
    raise ConfigError.bad_value("format", fmt, "one of " + ", ".join(FORMATS))
