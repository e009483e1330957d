"""Decaton's wire format: task metadata as the protobuf ``TaskMetadataProto`` in the ``dt_meta`` header.

The messages are declared here field for field as Decaton publishes them (``protocol/src/main/proto``:
``decaton.proto`` and ``decaton_internal.proto``), so a record a Java DecatonClient wrote is read here and a
record strom's DecatonClient or retry queue writes is read by a Java Decaton processor. The protobuf
runtime builds the message classes from these descriptors; no generated code is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from strom.errors import SerializationError

__all__ = ["METADATA_HEADER", "WireMetadata", "metadata_header", "unwrap_legacy", "with_metadata_header"]

METADATA_HEADER = "dt_meta"
"""The header Decaton 9+ writes a task's ``TaskMetadataProto`` into (the last one wins, as in Decaton)."""

_PACKAGE = "com.linecorp.decaton.protocol"
_I64 = descriptor_pb2.FieldDescriptorProto.TYPE_INT64
_STR = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_BYTES = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
_MSG = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE


def _message(name: str, fields: list[tuple[str, int, int, str | None]]) -> descriptor_pb2.DescriptorProto:
    message = descriptor_pb2.DescriptorProto(name=name)
    for field_name, number, kind, type_name in fields:
        message.field.add(name=field_name, number=number, type=kind, type_name=type_name,
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    return message


def _build_classes() -> tuple[type, type]:
    pool = descriptor_pool.DescriptorPool()
    public = descriptor_pb2.FileDescriptorProto(name="decaton.proto", package=_PACKAGE, syntax="proto3")
    public.message_type.append(_message("TaskMetadataProto", [
        ("timestamp_millis", 1, _I64, None), ("source_application_id", 2, _STR, None),
        ("source_instance_id", 3, _STR, None), ("retry_count", 4, _I64, None),
        ("scheduled_time_millis", 5, _I64, None)]))
    internal = descriptor_pb2.FileDescriptorProto(
        name="decaton_internal.proto", syntax="proto3", package=f"{_PACKAGE}.internal",
        dependency=["decaton.proto"])
    internal.message_type.append(_message("DecatonTaskRequest", [
        ("metadata", 1, _MSG, f".{_PACKAGE}.TaskMetadataProto"), ("serialized_task", 2, _BYTES, None)]))
    pool.Add(public)
    pool.Add(internal)
    return (message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.TaskMetadataProto")),
            message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.internal.DecatonTaskRequest")))


TaskMetadataProto, DecatonTaskRequest = _build_classes()


@dataclass(frozen=True)
class WireMetadata:
    """The fields of a ``TaskMetadataProto`` (proto3: 0 and "" mean unset)."""

    timestamp_ms: int = 0
    source_application_id: str = ""
    source_instance_id: str = ""
    retry_count: int = 0
    scheduled_time_ms: int = 0

    def to_bytes(self) -> bytes:
        return TaskMetadataProto(
            timestamp_millis=self.timestamp_ms, source_application_id=self.source_application_id,
            source_instance_id=self.source_instance_id, retry_count=self.retry_count,
            scheduled_time_millis=self.scheduled_time_ms).SerializeToString()

    @classmethod
    def from_proto(cls, proto: object) -> WireMetadata:
        return cls(proto.timestamp_millis, proto.source_application_id, proto.source_instance_id,  # type: ignore[attr-defined]
                   proto.retry_count, proto.scheduled_time_millis)  # type: ignore[attr-defined]

    @classmethod
    def from_bytes(cls, data: bytes) -> WireMetadata:
        try:
            return cls.from_proto(TaskMetadataProto.FromString(data))
        except DecodeError as exc:
            raise SerializationError(f"The {METADATA_HEADER!r} header is no Decaton TaskMetadataProto "
                                     f"({exc}): fix the producer of this topic.") from exc


def metadata_header(headers: list[tuple[str, bytes | None]] | None) -> WireMetadata | None:
    """The metadata in the last ``dt_meta`` header, None without one."""
    if not headers:
        return None
    for name, value in reversed(headers):
        if name == METADATA_HEADER:
            return WireMetadata.from_bytes(value or b"")
    return None


def with_metadata_header(headers: list[tuple[str, bytes | None]], metadata: WireMetadata
                         ) -> list[tuple[str, bytes | None]]:
    """``headers`` without any ``dt_meta`` one, then ``metadata`` as the ``dt_meta`` header (Decaton's
    ``TaskMetadataUtil.writeAsHeader``)."""
    return [(n, v) for n, v in headers if n != METADATA_HEADER] + [(METADATA_HEADER, metadata.to_bytes())]


def unwrap_legacy(value: bytes | None) -> tuple[WireMetadata, bytes]:
    """(metadata, task bytes) of a value in the format of Decaton 8 and earlier (``DecatonTaskRequest``)."""
    try:
        request = DecatonTaskRequest.FromString(value or b"")
    except DecodeError as exc:
        raise SerializationError(f"decaton.legacy.parse.fallback.enabled is on but the record is no "
                                 f"DecatonTaskRequest ({exc}); turn the property off once old producers "
                                 "are gone.") from exc
    return WireMetadata.from_proto(request.metadata), request.serialized_task
