"""Protobuf records in Confluent's wire format without generated classes, for ``strom consume
--value-deserializer protobuf`` and ``strom produce --value-serializer protobuf``: read, the writer's schema
comes from the registry (the id in the record) and the record's message (its message indexes) is built
from it at run time, shown in protobuf's JSON form; written, a JSON document becomes the first message of
the subject's latest schema (as Confluent's console producer writes its schema's first message).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from google.protobuf import (
    any_pb2,
    api_pb2,
    descriptor_pb2,
    duration_pb2,
    empty_pb2,
    field_mask_pb2,
    json_format,
    source_context_pb2,
    struct_pb2,
    timestamp_pb2,
    type_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from strom.broker.log.records import read_varint
from strom.errors import SerializationError

__all__ = ["ProtobufJson"]

_WELL_KNOWN = (any_pb2, source_context_pb2, type_pb2, api_pb2, descriptor_pb2, duration_pb2, empty_pb2,
               field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2)
"""The google/protobuf files a schema may import without a registry reference (as Confluent's serdes)."""


def message_indexes(data: bytes) -> tuple[tuple[int, ...], int]:
    """The message indexes after the magic byte and schema id (``(0,)`` written as one 0), and where the
    payload starts."""
    count, pos = read_varint(data, 5)
    if count == 0:
        return (0,), pos
    indexes = []
    for _ in range(count):
        index, pos = read_varint(data, pos)
        indexes.append(index)
    return tuple(indexes), pos


class ProtobufJson:
    """Reads records' protobuf payloads as dicts and writes dicts as protobuf; message classes are made
    once per (schema, message)."""

    def __init__(self, client: SchemaRegistryClient) -> None:
        self.client = client
        self._classes: dict[tuple[int, tuple[int, ...]], Callable[[], Message]] = {}

    def __call__(self, data: bytes) -> dict[str, Any]:
        if len(data) < 6 or data[0] != 0:
            raise SerializationError("not in Confluent's wire format (a magic byte 0, the schema id, the "
                                     "message indexes, then the message)")
        schema_id = int.from_bytes(data[1:5], "big")
        indexes, start = message_indexes(data)
        make = self._classes.get((schema_id, indexes))
        if make is None:
            make = self._classes[(schema_id, indexes)] = self._message_class(schema_id, indexes)
        message = make()
        message.ParseFromString(data[start:])
        return json_format.MessageToDict(message, preserving_proto_field_name=True)

    def writer(self, subject: str) -> Callable[[Any], bytes]:
        """Writes JSON documents as the first message of ``subject``'s latest schema."""
        latest = self.client.get_latest_version(subject, fmt="serialized")
        make = self._message_class(latest.schema_id, (0,), latest.schema)
        prefix = b"\0" + latest.schema_id.to_bytes(4, "big") + b"\0"  # message index [0] is written as 0

        def write(document: Any) -> bytes:
            message = make()
            json_format.ParseDict(document, message)
            return prefix + message.SerializeToString()

        return write

    def _message_class(self, schema_id: int, indexes: tuple[int, ...],
                       schema: Schema | None = None) -> Callable[[], Message]:
        if schema is None:
            schema = self.client.get_schema(schema_id, fmt="serialized")
        pool = DescriptorPool()
        for module in _WELL_KNOWN:
            pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
        self._add_references(schema, pool, set())
        file = _file_proto(f"schema-{schema_id}", schema)
        pool.Add(file)
        names: list[str] = []
        messages = file.message_type
        for index in indexes:
            if not 0 <= index < len(messages):
                raise SerializationError(f"message index {index} is not in schema {schema_id}")
            names.append(messages[index].name)
            messages = messages[index].nested_type
        full_name = ".".join(([file.package] if file.package else []) + names)
        return GetMessageClass(pool.FindMessageTypeByName(full_name))

    def _add_references(self, schema: Schema, pool: DescriptorPool, added: set[str]) -> None:
        for reference in schema.references or ():
            if reference.name in added or reference.name.startswith("google/protobuf/"):
                continue
            added.add(reference.name)
            version = self.client.get_version(reference.subject, reference.version, True, "serialized")
            self._add_references(version.schema, pool, added)
            pool.Add(_file_proto(reference.name, version.schema))


def _file_proto(name: str, schema: Schema) -> descriptor_pb2.FileDescriptorProto:
    """The schema's file: the registry gives it serialized (base64) when asked for ``fmt=serialized``."""
    file = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema.schema_str or ""))
    file.name = name
    return file
