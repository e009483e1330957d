"""TaskLease: which process holds a stream task open on this machine.

A task's RocksDB stores can be open in one process only, and Spark may run the task's next
micro-batch in another Python worker than the one that keeps it open. The holder keeps an
``flock`` on ``<task dir>/owner`` while the task is open (the kernel drops it if the process
dies); a process that needs the task writes ``<task dir>/release`` and waits for the lock, and
the holder's watcher (``strom.spark.runtime.parked``) closes the parked task, which frees it.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.errors import ProcessorStateError

if TYPE_CHECKING:
    from strom.streams.processor.internals.task import StreamTask

__all__ = ["ACQUIRE_TIMEOUT_S", "OWNER", "RELEASE", "LeasedTask", "TaskLease"]

OWNER = "owner"
RELEASE = "release"
ACQUIRE_TIMEOUT_S = 60.0
_RETRY_S = 0.005


class TaskLease:
    """The exclusive claim of this process on one task directory; ``release()`` ends it."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path, timeout_s: float = ACQUIRE_TIMEOUT_S) -> TaskLease:
        """Takes the lease, asking the current holder (another Python worker) to release it."""
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / OWNER, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout_s
        asked = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not asked:
                    (directory / RELEASE).touch()  # the holder's watcher closes the task
                    asked = True
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise ProcessorStateError(
                        f"Stream task directory {directory} is held by another process that did not "
                        f"release it in {timeout_s:.0f}s. Is another application instance using the "
                        "same state.dir and application.id?") from None
                time.sleep(_RETRY_S)
        (directory / RELEASE).unlink(missing_ok=True)
        return cls(directory, fd)

    @property
    def release_requested(self) -> bool:
        return (self.directory / RELEASE).exists()

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None



class LeasedTask:
    """A stream task a process holds open under its directory's lease (an active ``OpenTask`` or a
    ``StandbyTask``): both close the same way, once, the lease last so that the next holder finds the
    stores closed and checkpointed."""

    lease: TaskLease
    task: StreamTask
    _closed = False

    @property
    def release_requested(self) -> bool:
        return self.lease.release_requested

    def _clients(self) -> tuple[Any, ...]:
        """The Kafka clients to close after the task, in order."""
        raise NotImplementedError

    def close(self) -> None:
        """Closes the task (uncommitted store writes are dropped), its clients, then the lease; each
        step runs even when one before it raised."""
        if self._closed:
            return
        self._closed = True
        with ExitStack() as steps:  # callbacks run last-in first-out: the lease is released last
            steps.callback(self.lease.release)
            for client in reversed(self._clients()):
                steps.callback(client.close)
            self.task.close()
