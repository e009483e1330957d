"""Produce requests (versions 3 to 9) parsed without copying their record batches.

Every other request is parsed by kio. Produce is the hot path: its record sets are returned as
read-only views of the request frame, split into batches and written to the segment file from
there. Attribute names are kio's, so the Produce handler reads either. The parse is checked
against kio in `tests/broker/test_produce_request.py`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from strom.broker.protocol import MalformedRequest, Request

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id
FLEXIBLE_SINCE = 9


@dataclass(frozen=True, slots=True)
class PartitionProduceData:
    index: int
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class TopicProduceData:
    name: str
    partition_data: list[PartitionProduceData]


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


def parse_produce(frame: memoryview) -> Request:
    try:
        return _Reader(frame).request()
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        raise MalformedRequest(f"cannot parse a Produce request: {exc}") from exc


class _Reader:
    def __init__(self, frame: memoryview) -> None:
        self.frame = frame
        self.position = 0
        _key, self.version, self.correlation_id = _HEAD.unpack_from(frame, 0)
        self.flexible = self.version >= FLEXIBLE_SINCE

    def request(self) -> Request:
        self.position = _HEAD.size
        client_id = self._legacy_string()  # the header's client id is never compact
        if self.flexible:
            self._skip_tagged_fields()
        transactional_id = self._string()
        acks = self._i16()
        timeout_ms = self._i32()
        topics = [self._topic() for _ in range(self._array_length())]
        if self.flexible:
            self._skip_tagged_fields()
        return Request(0, self.version, self.correlation_id, client_id,
                       ProduceRequest(transactional_id, acks, timeout_ms, topics))

    def _topic(self) -> TopicProduceData:
        name = self._string()
        if name is None:
            raise ValueError("null topic name")
        partitions = []
        for _ in range(self._array_length()):
            index = self._i32()
            records = self._bytes()
            if self.flexible:
                self._skip_tagged_fields()
            partitions.append(PartitionProduceData(index, records))
        if self.flexible:
            self._skip_tagged_fields()
        return TopicProduceData(name, partitions)

    def _i16(self) -> int:
        (value,) = _I16.unpack_from(self.frame, self.position)
        self.position += 2
        return value

    def _i32(self) -> int:
        (value,) = _I32.unpack_from(self.frame, self.position)
        self.position += 4
        return value

    def _uvarint(self) -> int:
        shift = result = 0
        while True:
            byte = self.frame[self.position]
            self.position += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise ValueError("varint is too long")

    def _take(self, size: int) -> memoryview:
        if size < 0 or self.position + size > len(self.frame):
            raise ValueError(f"field of {size} bytes runs past the end of the frame")
        view = self.frame[self.position:self.position + size]
        self.position += size
        return view

    def _legacy_string(self) -> str | None:
        size = self._i16()
        return None if size == -1 else bytes(self._take(size)).decode()

    def _string(self) -> str | None:
        if not self.flexible:
            return self._legacy_string()
        size = self._uvarint() - 1
        return None if size == -1 else bytes(self._take(size)).decode()

    def _bytes(self) -> memoryview | None:
        size = self._uvarint() - 1 if self.flexible else self._i32()
        return None if size == -1 else self._take(size)

    def _array_length(self) -> int:
        length = self._uvarint() - 1 if self.flexible else self._i32()
        if length < 0 or length > len(self.frame):
            raise ValueError(f"array length {length} is impossible")
        return length

    def _skip_tagged_fields(self) -> None:
        for _ in range(self._uvarint()):
            self._uvarint()  # tag
            self._take(self._uvarint())
