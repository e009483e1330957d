"""Builds v2 record batches the way a producer sends them, for tests that talk to the broker raw."""

from __future__ import annotations

import datetime
import io

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from strom.broker.producer_state import ATTR_TRANSACTIONAL


def data_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes],
               transactional: bool = False) -> bytes:
    now = TZAwareMicros.parse(datetime.datetime.now(datetime.UTC))
    records = tuple(Record(attributes=i8(0), timestamp=now, offset=i64(i), key=None, value=v, headers=())
                    for i, v in enumerate(values))
    buffer = io.BytesIO()
    write_new_batch(buffer, NewRecordBatch(
        producer_id=i64(producer_id), producer_epoch=i16(epoch), base_sequence=i32(sequence),
        records=records, attributes=i16(ATTR_TRANSACTIONAL if transactional else 0)))
    return buffer.getvalue()
