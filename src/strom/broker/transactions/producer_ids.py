"""Producer ids that never repeat, even across broker restarts and crashes.

Ids are handed out from blocks; the end of the current block is written to disk (atomically, with
fsync) before any id of the block is used, so after a crash the next block starts past every id that
may have been given out.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, path: Path, block_size: int = BLOCK_SIZE) -> None:
        self._path = path
        self._block_size = block_size
        reserved = int(path.read_text()) if path.exists() else 0
        self._next = self._block_end = reserved

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._reserve(self._block_end + self._block_size)
        producer_id = self._next
        self._next += 1
        return producer_id

    def _reserve(self, block_end: int) -> None:
        tmp = self._path.with_suffix(".tmp")
        with tmp.open("w") as file:
            file.write(str(block_end))
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, self._path)
        self._block_end = block_end
