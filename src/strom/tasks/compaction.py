"""Decaton's CompactionProcessor: tasks of one key that arrive within a linger time are compacted to one.

For work where only the latest (or some chosen) task of a key matters, e.g. "refresh the cache of user
42" sent many times a second. The first task of a key opens a window of ``linger_ms``; each later task
of that key within it is compared with the one held by ``compactor(held, new)``, the dropped one is
completed at once (its offset may be committed), and when the window ends the survivor goes to the next
processor (``then_process``). Tasks without a key are not compacted: they go on at once.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from strom.errors import ConfigError
from strom.tasks.completion import Completion
from strom.tasks.context import ProcessingContext

__all__ = ["CompactChoice", "CompactingTask", "CompactionProcessor", "Compactor"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class CompactChoice(enum.Enum):
    """Which of two tasks of a key survives: the held one (left), the new one (right), or either."""

    PICK_LEFT = "left"
    PICK_RIGHT = "right"
    PICK_EITHER = "either"


@dataclass(frozen=True)
class CompactingTask(Generic[T]):
    key: bytes
    context: ProcessingContext
    task: T


Compactor = Callable[[CompactingTask[Any], CompactingTask[Any]], CompactChoice]
_Window = tuple[str, int, bytes]  # topic, partition, key: partitions never compact each other's tasks


class CompactionProcessor(Generic[T]):
    """``then_process(CompactionProcessor(linger_ms, compactor)).then_process(worker)``; plain (not
    ``async def``) pipelines only. Set ``decaton.deferred.complete.timeout.ms`` above ``linger_ms``."""

    def __init__(self, linger_ms: int, compactor: Compactor) -> None:
        if isinstance(linger_ms, bool) or not isinstance(linger_ms, int) or linger_ms <= 0:
            raise ConfigError(f"CompactionProcessor linger_ms must be a positive whole number of "
                              f"milliseconds, got {linger_ms!r}.")
        if not callable(compactor):
            raise ConfigError(f"CompactionProcessor needs a compactor(held, new) -> CompactChoice, got "
                              f"{compactor!r}.")
        self.linger_s = linger_ms / 1000
        self.compactor = compactor
        self._held: dict[_Window, tuple[CompactingTask[T], Completion]] = {}
        self._due: list[tuple[float, int, _Window]] = []
        self._sequence = itertools.count()
        self._changed = threading.Condition()
        self._flusher: threading.Thread | None = None

    def process(self, context: ProcessingContext, task: T) -> None:
        key = context.key()
        if key is None:
            context.push(task)
            return
        metadata = context.metadata()
        window = (metadata.topic, metadata.partition, key)
        new = CompactingTask(key, context, task)
        completion = context.defer_completion()
        with self._changed:
            held = self._held.get(window)
            if held is None:
                self._held[window] = (new, completion)
                heapq.heappush(self._due, (time.monotonic() + self.linger_s, next(self._sequence), window))
                self._changed.notify()
                self._start_flusher()
                return
            if self.compactor(held[0], new) is CompactChoice.PICK_RIGHT:
                self._held[window] = (new, completion)
                dropped = held[1]
            else:
                dropped = completion
        dropped.complete()

    def _start_flusher(self) -> None:
        """Called holding the lock: a flusher thread runs while windows are open, and ends when none is."""
        if self._flusher is None or not self._flusher.is_alive():
            self._flusher = threading.Thread(target=self._flush_due, name="compaction-flusher", daemon=True)
            self._flusher.start()

    def _flush_due(self) -> None:
        while True:
            with self._changed:
                while self._due and (wait := self._due[0][0] - time.monotonic()) > 0:
                    self._changed.wait(wait)
                if not self._due:
                    self._flusher = None
                    return
                _, _, window = heapq.heappop(self._due)
                survivor, completion = self._held.pop(window)
            try:
                survivor.context.push(survivor.task)
            except Exception:  # the pipeline logs a processor's failure; this is the push itself failing
                log.exception("Compaction: handing on the task of key %r failed", survivor.key)
            finally:
                completion.complete()
