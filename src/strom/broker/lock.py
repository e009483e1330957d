"""The data directory's lock: one broker (or `strom broker add-user`) uses a data directory at a time."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from strom.errors import BrokerStartError

# A process forked by another thread (a JVM being started, say) shares the lock's open file until its exec
# closes it: a lock just released stays held that long, so a busy lock is tried again for this many seconds.
FORKED_HOLDER_GRACE_S = 2.0


def lock_data_dir(data_dir: Path) -> int:
    """Creates the data directory and locks it for this process (`<data dir>/.lock`, as Kafka's), so
    two brokers never write one log; returns the lock's descriptor."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise BrokerStartError(f"Cannot use {data_dir} as the data directory: "
                               f"{os.strerror(exc.errno or 0)}. Pass a writable --data-dir.") from exc
    try:
        _flock_within_grace(descriptor)
    except BlockingIOError:
        owner = os.pread(descriptor, 20, 0).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        raise BrokerStartError(f"{data_dir} is used by another strom broker (pid {owner}): stop it, or "
                               "pass another --data-dir.") from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, str(os.getpid()).encode(), 0)
    return descriptor


def _flock_within_grace(descriptor: int) -> None:
    deadline = time.monotonic() + FORKED_HOLDER_GRACE_S
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)
