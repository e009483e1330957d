"""Decaton's BatchingProcessor: tasks collected into batches, for downstreams that do batched I/O well.

Subclass it and implement ``process_batching_tasks(batch)``; a batch is handed over every ``linger_ms``
(whatever it holds then) and as soon as it holds ``capacity`` tasks. Each task's completion is deferred
until the batch handler calls ``batching_task.completion.complete()`` (or ``batching_task.context.retry()``)
for it: only then its offset may be committed. The handler runs on the processor's own flusher thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from strom.errors import ConfigError
from strom.tasks.completion import Completion
from strom.tasks.context import ProcessingContext

__all__ = ["BatchingProcessor", "BatchingTask"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class BatchingTask(Generic[T]):
    completion: Completion
    context: ProcessingContext
    task: T


def _positive(name: str, value: int | Callable[[], int]) -> Callable[[], int]:
    """A supplier of a positive int that falls back to its last good value when it turns invalid (Decaton's);
    it must be valid at first."""
    supplier = value if callable(value) else (lambda: value)
    last_good: list[int] = []

    def get() -> int:
        try:
            current = supplier()
        except Exception as exc:
            if not last_good:
                raise ConfigError(f"BatchingProcessor {name} supplier raised {exc!r}.") from exc
            log.warning("BatchingProcessor %s supplier raised %r; keeping %d", name, exc, last_good[0])
            return last_good[0]
        if isinstance(current, bool) or not isinstance(current, int) or current <= 0:
            if not last_good:
                raise ConfigError(f"BatchingProcessor {name} must be a positive whole number, "
                                  f"got {current!r}.")
            log.warning("BatchingProcessor %s %r is invalid; keeping %d", name, current, last_good[0])
            return last_good[0]
        last_good[:] = [current]
        return current

    get()
    return get


class BatchingProcessor(Generic[T]):
    """``then_process(MyBatcher(linger_ms=100, capacity=500))``; plain (not ``async def``) pipelines only.
    ``linger_ms`` and ``capacity`` may be functions returning the current value (e.g. a property's).
    Set ``decaton.deferred.complete.timeout.ms`` (if any) above ``linger_ms``. ``close()`` drops the tasks
    still collected (not completed, so processed again after a restart), as Decaton's does."""

    def __init__(self, linger_ms: int | Callable[[], int], capacity: int | Callable[[], int]) -> None:
        self._linger_ms = _positive("linger_ms", linger_ms)
        self._capacity = _positive("capacity", capacity)
        self._batch: list[BatchingTask[T]] = []
        self._full: deque[list[BatchingTask[T]]] = deque()
        self._changed = threading.Condition()
        self._closed = False
        self._flusher: threading.Thread | None = None

    def process_batching_tasks(self, batch: list[BatchingTask[T]]) -> None:
        """Processes a batch; must complete (or retry) every task of it, also when it fails."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_batching_tasks(batch).")

    def process(self, context: ProcessingContext, task: T) -> None:
        completion = context.defer_completion()
        with self._changed:
            if self._closed:
                return  # the task stays pending: processed again after the restart
            self._batch.append(BatchingTask(completion, context, task))
            if len(self._batch) >= self._capacity():
                self._full.append(self._batch)
                self._batch = []
                self._changed.notify()
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._run, name=f"batching-{id(self):x}", daemon=True)
                self._flusher.start()

    def _next_batch(self, deadline: float) -> tuple[list[BatchingTask[T]] | None, float]:
        """The next batch to hand over (None once closed) and the next linger deadline."""
        with self._changed:
            while not self._full and not self._closed and (wait := deadline - time.monotonic()) > 0:
                self._changed.wait(wait)
            if self._closed:
                return None, deadline
            if self._full:
                return self._full.popleft(), deadline
            batch, self._batch = self._batch, []
            return batch, time.monotonic() + self._linger_ms() / 1000

    def _run(self) -> None:
        deadline = time.monotonic() + self._linger_ms() / 1000
        while True:
            batch, deadline = self._next_batch(deadline)
            if batch is None:
                return
            if not batch:
                continue
            try:
                self.process_batching_tasks(batch)
            except Exception:
                log.exception("%s.process_batching_tasks raised on %d tasks; tasks it did not complete stay "
                              "pending", type(self).__name__, len(batch))

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._batch = []
            self._full.clear()
            self._changed.notify()
            flusher = self._flusher
        if flusher is not None and flusher is not threading.current_thread():
            flusher.join()
