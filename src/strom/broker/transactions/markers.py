"""Control batches: the commit and abort markers the coordinator writes into each partition."""

from __future__ import annotations

from strom.broker.log.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, build_batch
from strom.broker.producer_state import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_KEY, CONTROL_VALUE


def control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp_ms: int, base_offset: int = 0) -> bytes:
    """A one-record transactional control batch ending the producer's transaction."""
    key = CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    return build_batch([(key, CONTROL_VALUE.pack(0, coordinator_epoch))], timestamp_ms, base_offset,
                       attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL, producer_id=producer_id,
                       producer_epoch=producer_epoch)
