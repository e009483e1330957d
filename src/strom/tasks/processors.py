"""Processors chained into a pipeline (Decaton's ProcessorsBuilder / ProcessPipeline)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.errors import ConfigError, ProcessingError, SerializationError
from strom.tasks.completion import Completion
from strom.tasks.context import ProcessingContext, TaskRequest
from strom.tasks.properties import ProcessorProperties, ProcessorPropertiesView
from strom.tasks.rate_limiter import RateLimiter

if TYPE_CHECKING:
    from strom.tasks.retry import RetryQueue

log = logging.getLogger(__name__)

Deserializer = Callable[[bytes | None], Any]
ProcessFn = Callable[[ProcessingContext, Any], Any]

_COMPLETED = Completion()
_COMPLETED.complete()


def _process_fn(processor: Any) -> ProcessFn:
    fn = getattr(processor, "process", processor)
    if not callable(fn):
        raise ConfigError(f"{processor!r} is not a processor: give an object with process(context, task) "
                          "or a function (context, task).")
    return fn


class ProcessorsBuilder:
    """``ProcessorsBuilder.consuming(topic, deserializer).then_process(p1).then_process(p2)``.

    Processors of one pipeline are all plain (run on threads) or all ``async def`` (run on asyncio)."""

    def __init__(self, topic: str, deserializer: Deserializer | None) -> None:
        self.topic = topic
        self.deserializer = deserializer
        self.processors: list[ProcessFn] = []

    @classmethod
    def consuming(cls, topic: str, deserializer: Deserializer | None = None) -> ProcessorsBuilder:
        """``deserializer`` turns the record value (bytes) into the task; without one, tasks are bytes."""
        return cls(topic, deserializer)

    def then_process(self, processor: Any) -> ProcessorsBuilder:
        self.processors.append(_process_fn(processor))
        return self

    @property
    def asynchronous(self) -> bool:
        kinds = {inspect.iscoroutinefunction(fn) for fn in self.processors}
        if len(kinds) > 1:
            raise ConfigError("A pipeline mixes async def and plain processors: make them all one kind.")
        return kinds == {True}

    def validate(self) -> None:
        if not self.processors:
            raise ConfigError(f"No processor for topic {self.topic!r}: add one with then_process(...).")
        _ = self.asynchronous


class ProcessPipeline:
    """Runs one task through the processors of a partition; shared by the partition's units."""

    def __init__(self, builder: ProcessorsBuilder, props: ProcessorPropertiesView, rate_limiter: RateLimiter,
                 retry_queue: RetryQueue | None) -> None:
        self._fns = builder.processors
        self._deserializer = builder.deserializer
        self.asynchronous = builder.asynchronous
        self._timeout = props.get(ProcessorProperties.DEFERRED_COMPLETE_TIMEOUT_MS)
        self._rate_limiter = rate_limiter
        self._retry_queue = retry_queue

    def deferred_timeout_ms(self) -> int:
        return self._timeout.value

    def _deserialize(self, request: TaskRequest) -> tuple[bool, Any]:
        if self._deserializer is None:
            return True, request.value
        try:
            return True, self._deserializer(request.value)
        except Exception as exc:
            md = request.metadata
            log.error("%s", SerializationError(
                f"Dropping task at {md.topic}-{md.partition}@{md.offset}: the deserializer raised {exc!r}. "
                "Fix the deserializer or the producer of this topic."))
            request.close_stage()
            return False, None

    def handle(self, request: TaskRequest) -> None:
        """Entry of a thread unit: waits for a retry's due time and the rate limit, then stage 0."""
        if request.due_ms and (delay := request.due_ms / 1000 - time.time()) > 0:
            time.sleep(delay)
        if self._rate_limiter.limited():
            self._rate_limiter.acquire()
        request.started = time.monotonic()
        ok, task = self._deserialize(request)
        if ok:
            self._run_sync(request, 0, task)

    async def handle_async(self, request: TaskRequest) -> None:
        """Entry of an asyncio unit (stage 0 inlined: one coroutine less per task)."""
        if request.due_ms and (delay := request.due_ms / 1000 - time.time()) > 0:
            await asyncio.sleep(delay)
        if self._rate_limiter.limited():
            await self._rate_limiter.acquire_async()
        request.started = time.monotonic()
        ok, task = self._deserialize(request)
        if not ok:
            return
        context = ProcessingContext(request, self, 0)
        try:
            await self._fns[0](context, task)
        except Exception as exc:
            self._failed(request, 0, exc)
        if not context.deferred():
            request.close_stage()

    def run_stage(self, request: TaskRequest, stage: int, task: Any) -> Any:
        if stage >= len(self._fns):
            raise ProcessingError(f"push() from the last processor of the pipeline (stage {stage}): add "
                                  "another processor with then_process(...).")
        if self.asynchronous:
            return self._run_async(request, stage, task)
        return self._run_sync(request, stage, task)

    def _failed(self, request: TaskRequest, stage: int, exc: BaseException) -> None:
        md = request.metadata
        log.error("Processor %d raised on %s-%d@%d; the task counts as completed (use context.retry() "
                  "to retry): %r", stage, md.topic, md.partition, md.offset, exc, exc_info=exc)

    def _run_sync(self, request: TaskRequest, stage: int, task: Any) -> Completion:
        if stage:
            request.open_stage()
        context = ProcessingContext(request, self, stage)
        try:
            self._fns[stage](context, task)
        except Exception as exc:
            self._failed(request, stage, exc)
        if context.deferred():
            return context.defer_completion()
        request.close_stage()
        return _COMPLETED

    async def _run_async(self, request: TaskRequest, stage: int, task: Any) -> Completion:
        if stage:
            request.open_stage()
        context = ProcessingContext(request, self, stage)
        try:
            await self._fns[stage](context, task)
        except Exception as exc:
            self._failed(request, stage, exc)
        if context.deferred():
            return context.defer_completion()
        request.close_stage()
        return _COMPLETED

    @property
    def retry_enabled(self) -> bool:
        return self._retry_queue is not None

    def retry(self, request: TaskRequest, completion: Completion) -> None:
        self._retry_queue.send(request, completion)  # type: ignore[union-attr]
