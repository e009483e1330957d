"""Builds v2 record batches the way a producer sends them, for tests that talk to the broker raw."""

from __future__ import annotations

import time

from strom.broker.log.records import ATTR_TRANSACTIONAL, build_batch


def data_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes],
               transactional: bool = False) -> bytes:
    return build_batch([(None, v) for v in values], int(time.time() * 1000),
                       attributes=ATTR_TRANSACTIONAL if transactional else 0,
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
