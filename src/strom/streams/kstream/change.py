"""Change: what a KTable forwards — the new value and (with sendOldValues) the old one."""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from strom.errors import SerializationError

__all__ = [
    "Change",
    "ChangeSerde",
    "OutOfOrderChange",
]


class Change(NamedTuple):
    new_value: Any
    old_value: Any = None

    @property
    def is_latest(self) -> bool:
        """Whether the update is its key's latest version (see OutOfOrderChange)."""
        return True


class OutOfOrderChange(Change):
    """An update a versioned table stored behind a later version of its key (Kafka's Change with
    ``isLatest`` false, KIP-914): ``to_stream`` still forwards it; joins and ``group_by`` drop it."""

    __slots__ = ()

    @property
    def is_latest(self) -> bool:
        return False


_LENGTH = struct.Struct(">i")
_NEW, _OLD = 1, 2


class ChangeSerde:
    """Serializes a Change into one record (repartition topics of KTable.group_by): a flag byte saying
    which sides are present, the length of the new value, then the new and the old value bytes.

    ``inner`` None means the application's ``default.value.serde``, filled in when the task is built.
    """

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner

    def with_default(self, default: Any) -> ChangeSerde:
        return ChangeSerde(self.inner if self.inner is not None else default)

    def serializer(self) -> ChangeSerde:
        return self

    def deserializer(self) -> ChangeSerde:
        return self

    def serialize(self, topic: str | None, data: Change | None, headers: Any = None) -> bytes | None:
        if data is None:
            return None
        ser = self.inner.serializer()
        new = ser.serialize(topic, data.new_value)
        old = ser.serialize(topic, data.old_value)
        flag = (_NEW if new is not None else 0) | (_OLD if old is not None else 0)
        new_bytes = new or b""
        return bytes([flag]) + _LENGTH.pack(len(new_bytes)) + new_bytes + (old or b"")

    def deserialize(self, topic: str | None, data: bytes | None, headers: Any = None) -> Change | None:
        if data is None:
            return None
        if len(data) < 5 or data[0] > (_NEW | _OLD):
            raise SerializationError(
                f"Record of topic {topic!r} is not a serialized Change ({len(data)} bytes); "
                "only strom's KTable.group_by writes this topic."
            )
        flag = data[0]
        (length,) = _LENGTH.unpack_from(data, 1)
        de = self.inner.deserializer()
        new = de.deserialize(topic, bytes(data[5 : 5 + length])) if flag & _NEW else None
        old = de.deserialize(topic, bytes(data[5 + length :])) if flag & _OLD else None
        return Change(new, old)
