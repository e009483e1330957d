"""A partition log in memory, appended through producer state like the broker's append path."""

from __future__ import annotations

import time
from collections.abc import Iterator

from strom.broker.log.records import BatchHeader
from strom.broker.producer_state import ProducerStateManager
from strom.broker.transactions.markers import control_batch


class Log:
    """A partition's batches in memory, appended through producer state like the broker's append path."""

    def __init__(self, state: ProducerStateManager) -> None:
        self.state = state
        self.batches: list[tuple[bytes, int]] = []
        self.end = 0

    def produce(self, batch: bytes) -> int:
        duplicate = self.state.check_append(BatchHeader.parse(batch))
        if duplicate is not None:
            return duplicate.first_offset
        return self._append(batch)

    def marker(self, pid: int, epoch: int, commit: bool) -> int:
        return self.produce(control_batch(pid, epoch, commit, 0, int(time.time() * 1000)))

    def _append(self, batch: bytes) -> int:
        base = self.end
        self.batches.append((batch, base))
        self.end += BatchHeader.parse(batch).last_offset_delta + 1
        self.state.on_append(batch, base)
        return base

    def replay(self, start: int) -> Iterator[tuple[int, bytes]]:
        for batch, base in self.batches:
            if base >= start:
                yield base, batch
