"""Stream tasks parked between micro-batches in a (reused) Spark Python worker.

After a committed batch the executor parks its open task here, keyed by ``(application.id,
task id)``; the task's next batch takes it back if it lands in the same worker. A watcher thread
closes a parked task when another process asks for it (``TaskLease.release_requested``) or when
it has been idle for ``IDLE_S`` (an application that stopped, a task whose input went quiet).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

__all__ = ["IDLE_S", "PARKED", "WATCH_EVERY_S", "Parkable", "ParkedTasks"]

log = logging.getLogger(__name__)

IDLE_S = 60.0
WATCH_EVERY_S = 0.01


class Parkable(Protocol):
    @property
    def release_requested(self) -> bool: ...

    def close(self) -> None: ...


class ParkedTasks:
    """Open tasks not running a batch right now; thread-safe."""

    def __init__(self, idle_s: float = IDLE_S) -> None:
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._tasks: dict[tuple[str, str], tuple[Parkable, float]] = {}
        self._watcher: threading.Thread | None = None

    def take(self, key: tuple[str, str]) -> Parkable | None:
        """Removes and returns the parked task under ``key``, if any: the caller owns it now."""
        with self._lock:
            entry = self._tasks.pop(key, None)
        return None if entry is None else entry[0]

    def peek(self, key: tuple[str, str]) -> Parkable | None:
        """The parked task under ``key``, left parked."""
        with self._lock:
            entry = self._tasks.get(key)
        return None if entry is None else entry[0]

    def park(self, key: tuple[str, str], task: Parkable) -> None:
        with self._lock:
            replaced = self._tasks.pop(key, None)
            self._tasks[key] = (task, time.monotonic())
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="strom-parked-tasks", daemon=True)
                self._watcher.start()
        if replaced is not None:
            replaced[0].close()

    def held(self, application_id: str) -> list[str]:
        """The task ids of ``application_id`` parked here."""
        with self._lock:
            return sorted(task for app, task in self._tasks if app == application_id)

    def __len__(self) -> int:
        return len(self._tasks)

    def close_all(self) -> None:
        with self._lock:
            tasks = [task for task, _ in self._tasks.values()]
            self._tasks.clear()
        for task in tasks:
            task.close()

    def _watch(self) -> None:
        while True:
            time.sleep(WATCH_EVERY_S)
            for key, task in self._due():
                log.info("Closing parked stream task %s of %s (released or idle)", key[1], key[0])
                try:
                    task.close()
                except Exception:  # a failing close must not stop the watcher
                    log.exception("Closing parked stream task %s failed", key)

    def _due(self) -> list[tuple[tuple[str, str], Parkable]]:
        now = time.monotonic()
        with self._lock:
            due = [key for key, (task, since) in self._tasks.items()
                   if task.release_requested or now - since > self._idle_s]
            return [(key, self._tasks.pop(key)[0]) for key in due]


PARKED = ParkedTasks()
"""This process's parked tasks."""
