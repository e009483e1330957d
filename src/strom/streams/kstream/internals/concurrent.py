"""Key-ordered concurrent processing inside a topology (``map_values_concurrently``,
``process_concurrently``) for I/O-bound steps.

Work runs on :class:`strom.concurrency.KeyOrderedExecutor` units; results are forwarded on the stream
thread only, in per-key order (a key always runs on the same unit, and a unit finishes its items in
order). ``flush()``, which the task calls at commit before flushing caches, waits for all work in
flight and forwards it, so nothing is committed before it was processed.
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from strom.concurrency import AsyncRuntime, KeyOrderedExecutor
from strom.errors import ConfigError, ProcessingError
from strom.streams.processor.api import Processor, ProcessorContext, Record

RecordFn = Callable[[Record], Any]

_WAIT_TICK_S = 0.0005


def _outputs(result: Any) -> Iterable[Record]:
    if result is None:
        return ()
    if isinstance(result, Record):
        return (result,)
    return result


class ConcurrentProcessor(Processor):
    """Runs ``fn(record)`` on ``concurrency`` key-ordered units and forwards what it returns (a Record,
    an iterable of Records, or None). ``fn`` may be ``async def``: then the units are asyncio tasks."""

    def __init__(self, fn: RecordFn, concurrency: int, max_in_flight: int | None = None) -> None:
        if concurrency < 1:
            raise ConfigError.bad_value("concurrency", concurrency, "an integer >= 1")
        self._fn = fn
        self._concurrency = concurrency
        self._max_in_flight = max_in_flight or max(64, concurrency * 8)
        self._asynchronous = inspect.iscoroutinefunction(fn)
        self._done: deque[tuple[Record, Any, BaseException | None]] = deque()
        self._executor: KeyOrderedExecutor | None = None

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        if self._asynchronous:
            runtime = AsyncRuntime.shared()
            self._executor = KeyOrderedExecutor(self._run_async, self._concurrency, runtime=runtime)
        else:
            name = f"{context.task_id}-concurrent"
            self._executor = KeyOrderedExecutor(self._run, self._concurrency, name=name)

    def _run(self, record: Record) -> None:
        try:
            self._done.append((record, self._fn(record), None))
        except Exception as exc:
            self._done.append((record, None, exc))

    async def _run_async(self, record: Record) -> None:
        try:
            self._done.append((record, await self._fn(record), None))
        except Exception as exc:
            self._done.append((record, None, exc))

    def process(self, record: Record) -> None:
        executor = self._executor
        assert executor is not None, "init() runs before process()"
        while executor.backlog() >= self._max_in_flight:
            self._forward_done()
            time.sleep(_WAIT_TICK_S)
        executor.submit(record.key, record)
        self._forward_done()

    def _forward_done(self) -> None:
        done = self._done
        while done:
            record, result, error = done.popleft()
            if error is not None:
                raise ProcessingError(
                    f"The concurrent step raised on the record with key {record.key!r}: "
                    f"{error!r}. Fix the function or catch the error in it."
                ) from error
            for output in _outputs(result):
                self.context.forward(output)

    def flush(self) -> None:
        """Waits for every record in flight and forwards the results (called by the task at commit)."""
        if self._executor is not None:
            while not self._executor.idle():
                self._forward_done()
                time.sleep(_WAIT_TICK_S)
        self._forward_done()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None


def map_values_supplier(fn: Callable[[Any], Any], concurrency: int) -> Callable[[], ConcurrentProcessor]:
    """The processor behind ``KStream.map_values_concurrently``: ``fn(value)`` (plain or async)."""
    if inspect.iscoroutinefunction(fn):

        async def apply_async(record: Record) -> Record:
            return record.with_value(await fn(record.value))

        return lambda: ConcurrentProcessor(apply_async, concurrency)

    def apply(record: Record) -> Record:
        return record.with_value(fn(record.value))

    return lambda: ConcurrentProcessor(apply, concurrency)


def process_supplier(fn: RecordFn, concurrency: int) -> Callable[[], ConcurrentProcessor]:
    """The processor behind ``KStream.process_concurrently``: ``fn(record)`` returns records to forward."""
    return lambda: ConcurrentProcessor(fn, concurrency)
