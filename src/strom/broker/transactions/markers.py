"""Control batches: the commit and abort markers the coordinator writes into each partition."""

from __future__ import annotations

import datetime
import io
import struct

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from strom.broker.producer_state import ATTR_CONTROL, ATTR_TRANSACTIONAL, CONTROL_ABORT, CONTROL_COMMIT

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp_ms: int) -> bytes:
    """A one-record transactional control batch ending the producer's transaction (base offset 0)."""
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, datetime.UTC)
    record = Record(
        attributes=i8(0),
        timestamp=TZAwareMicros.parse(moment),
        offset=i64(0),
        key=_CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT),
        value=_CONTROL_VALUE.pack(0, coordinator_epoch),
        headers=(),
    )
    buffer = io.BytesIO()
    write_new_batch(buffer, NewRecordBatch(
        producer_id=i64(producer_id),
        producer_epoch=i16(producer_epoch),
        base_sequence=i32(-1),
        records=(record,),
        attributes=i16(ATTR_CONTROL | ATTR_TRANSACTIONAL),
    ))
    return buffer.getvalue()
