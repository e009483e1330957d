"""Producer id allocation for idempotent producers; ids never repeat, even across restarts.

Ids are handed out from blocks; the end of the current block is persisted (and fsynced) before
any id of it is used, so a restart continues after the last block.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / "producer-id-block"
        self._next = int(self._path.read_text()) if self._path.exists() else 0
        self._block_end = self._next

    def allocate(self) -> int:
        if self._next >= self._block_end:
            self._persist(self._next + BLOCK_SIZE)
        producer_id = self._next
        self._next += 1
        return producer_id

    def _persist(self, block_end: int) -> None:
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            f.write(str(block_end))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(self._path)
        self._block_end = block_end
