"""Processors chained into a pipeline (Decaton's ProcessorsBuilder / ProcessPipeline)."""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from strom.errors import ConfigError, ProcessingError, SerializationError
from strom.kafka.serdes import Deserializer as KafkaDeserializer
from strom.kafka.serdes import Serde, decoder_of
from strom.tasks.commit_control import OutOfOrderCommitControl
from strom.tasks.completion import Completion
from strom.tasks.context import (
    HEADERS,
    VALUE,
    ConsumedRecord,
    DecatonTask,
    ProcessingContext,
    Record,
    TaskRequest,
)
from strom.tasks.metrics import PartitionMetrics
from strom.tasks.properties import ProcessorProperties, ProcessorPropertiesView
from strom.tasks.protocol import metadata_header, unwrap_legacy
from strom.tasks.rate_limiter import RateLimiter
from strom.tasks.retry import RetryQueue

__all__ = [
    "Deserializer", "ProcessFn", "ProcessPipeline", "ProcessorScope", "ProcessorsBuilder", "TaskExtractor",
]

log = logging.getLogger(__name__)

Deserializer = Callable[[bytes | None], Any]


class TaskExtractor(Protocol):
    """Decaton's TaskExtractor: reads a task and its metadata from a record of any format. A record it
    raises on is logged and skipped (completed)."""

    def extract(self, record: ConsumedRecord) -> DecatonTask[Any]: ...


ProcessFn = Callable[[ProcessingContext, Any], Any]

_COMPLETED = Completion()
_COMPLETED.complete()
_DROPPED = object()


def _process_fn(processor: Any) -> ProcessFn:
    fn = getattr(processor, "process", processor)
    if not callable(fn):
        raise ConfigError(f"{processor!r} is not a processor: give an object with process(context, task) "
                          "or a function (context, task).")
    return fn


class ProcessorScope(enum.Enum):
    """Decaton's ProcessorScope: which processor instances ``then_process(factory, scope)`` makes, for
    processors that keep state or clients that must not be shared."""

    PROVIDED = "provided"
    """The processor given, shared by every partition and unit (the default); strom never closes it."""
    SINGLETON = "singleton"
    """One instance for the subscription, shared by every partition, closed with the subscription."""
    PARTITION = "partition"
    """One instance per assigned partition, closed when the partition is revoked."""
    THREAD = "thread"
    """One instance per unit thread of a partition (plain processors only), closed with the partition."""


@dataclass
class _Scoped:
    factory: Callable[[], Any]
    scope: ProcessorScope
    asynchronous: bool
    singleton: Any = None

    def shared_instance(self, lock: threading.Lock) -> Any:
        with lock:
            if self.singleton is None:
                self.singleton = self.factory()
            return self.singleton


def _makes_async_processors(factory: Callable[[], Any]) -> bool:
    """A class tells by its ``process``; any other factory is called once to see what it makes."""
    if isinstance(factory, type):
        return inspect.iscoroutinefunction(getattr(factory, "process", None))
    try:
        probe = factory()
    except TypeError as exc:
        raise ConfigError(f"A scoped processor's factory is called without arguments to make a processor; "
                          f"{factory!r} failed: {exc}.") from exc
    try:
        return inspect.iscoroutinefunction(_process_fn(probe))
    finally:
        _close(probe)


def _close(processor: Any) -> None:
    close = getattr(processor, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            log.exception("Closing processor %r failed", processor)


class _ThreadScoped:
    """Dispatches to the calling thread's own instance, made on its first task."""

    def __init__(self, factory: Callable[[], Any], instances: list[Any]) -> None:
        self._factory = factory
        self._instances = instances
        self._local = threading.local()
        self._lock = threading.Lock()

    def process(self, context: ProcessingContext, task: Any) -> Any:
        fn = getattr(self._local, "fn", None)
        if fn is None:
            instance = self._factory()
            with self._lock:
                self._instances.append(instance)
            fn = self._local.fn = _process_fn(instance)
        return fn(context, task)


class ProcessorsBuilder:
    """``ProcessorsBuilder.consuming(topic, deserializer).then_process(p1).then_process(p2)``.

    Processors of one pipeline are all plain (run on threads) or all ``async def`` (run on asyncio)."""

    def __init__(self, topic: str, deserializer: Deserializer | TaskExtractor | None) -> None:
        self.topic = topic
        self.extractor: TaskExtractor | None = None
        self.deserializer: Deserializer | None = None
        if callable(getattr(deserializer, "extract", None)):
            self.extractor = deserializer  # type: ignore[assignment]
        elif isinstance(deserializer, Serde | KafkaDeserializer):
            plain = deserializer.deserializer() if isinstance(deserializer, Serde) else deserializer
            self.deserializer = decoder_of(plain, topic)
        elif deserializer is None or callable(deserializer):
            self.deserializer = deserializer
        else:
            raise ConfigError(f"consuming({topic!r}, ...) takes a deserializer (bytes -> task, or a strom "
                              f"Serde or Deserializer) or a TaskExtractor (an object with extract(record)), "
                              f"got {deserializer!r}.")
        self.processors: list[ProcessFn | _Scoped] = []
        self._singleton_lock = threading.Lock()

    @classmethod
    def consuming(cls, topic: str,
                  deserializer: Deserializer | TaskExtractor | None = None) -> ProcessorsBuilder:
        """``deserializer`` (a function, or a strom Serde or Deserializer such as a Schema Registry serde)
        turns the record value (bytes) into the task (without one, tasks are bytes); a TaskExtractor instead
        reads task and metadata from the whole record, in any format."""
        return cls(topic, deserializer)

    def then_process(self, processor: Any,
                     scope: ProcessorScope = ProcessorScope.PROVIDED) -> ProcessorsBuilder:
        """``processor`` (an object with ``process(context, task)`` or a function), or with a SINGLETON,
        PARTITION or THREAD ``scope`` a factory of processors (their class, or a function returning one)."""
        if not isinstance(scope, ProcessorScope):
            raise ConfigError(f"then_process scope must be a ProcessorScope, got {scope!r}.")
        if scope is ProcessorScope.PROVIDED:
            self.processors.append(_process_fn(processor))
            return self
        if not callable(processor) or (hasattr(processor, "process") and not isinstance(processor, type)):
            raise ConfigError(f"With scope {scope.name}, then_process takes a factory that makes a processor "
                              f"per {scope.value} (the processor class, or a function), got {processor!r}.")
        asynchronous = _makes_async_processors(processor)
        if asynchronous and scope is ProcessorScope.THREAD:
            raise ConfigError("ProcessorScope.THREAD needs plain processors: async def ones share the event "
                              "loop's thread; use ProcessorScope.PARTITION.")
        self.processors.append(_Scoped(processor, scope, asynchronous))
        return self

    @property
    def asynchronous(self) -> bool:
        kinds = {entry.asynchronous if isinstance(entry, _Scoped) else inspect.iscoroutinefunction(entry)
                 for entry in self.processors}
        if len(kinds) > 1:
            raise ConfigError("A pipeline mixes async def and plain processors: make them all one kind.")
        return kinds == {True}

    def validate(self) -> None:
        if not self.processors:
            raise ConfigError(f"No processor for topic {self.topic!r}: add one with then_process(...).")
        _ = self.asynchronous

    def singleton(self, entry: _Scoped) -> Any:
        return entry.shared_instance(self._singleton_lock)

    def close(self) -> None:
        """Closes the SINGLETON processors and the TaskExtractor (those with a ``close()``), with the
        subscription."""
        for entry in self.processors:
            if isinstance(entry, _Scoped) and entry.singleton is not None:
                _close(entry.singleton)
                entry.singleton = None
        if self.extractor is not None:
            _close(self.extractor)


class ProcessPipeline:
    """Runs fetched records of a partition through its processors (shared by the partition's units) and
    reports completed ones to the partition's commit control."""

    def __init__(self, topic: str, partition: int, builder: ProcessorsBuilder, props: ProcessorPropertiesView,
                 rate_limiter: RateLimiter, retry_queue: RetryQueue | None,
                 commit_control: OutOfOrderCommitControl, metrics: PartitionMetrics) -> None:
        self.topic = topic
        self.partition = partition
        self._builder = builder
        self._instances: list[Any] = []  # scoped processors made for this partition, closed with it
        self._fns = [self._resolve(entry) for entry in builder.processors]
        self._deserializer = builder.deserializer
        self._extractor = builder.extractor
        # a retry topic's records carry Decaton's metadata header around what the extractor wrote
        self._extract_whole_record = self._extractor is not None and (
            retry_queue is None or topic != retry_queue.retry_topic)
        self._legacy_fallback = props.get(ProcessorProperties.LEGACY_PARSE_FALLBACK_ENABLED)
        self.asynchronous = builder.asynchronous
        self._timeout = props.get(ProcessorProperties.DEFERRED_COMPLETE_TIMEOUT_MS)
        self._rate_limiter = rate_limiter
        self._retry_queue = retry_queue
        self._commit_control = commit_control
        self._metrics = metrics

    def _resolve(self, entry: ProcessFn | _Scoped) -> ProcessFn:
        if not isinstance(entry, _Scoped):
            return entry
        if entry.scope is ProcessorScope.THREAD:
            return _ThreadScoped(entry.factory, self._instances).process
        if entry.scope is ProcessorScope.SINGLETON:
            return _process_fn(self._builder.singleton(entry))
        instance = entry.factory()
        self._instances.append(instance)
        return _process_fn(instance)

    def close(self) -> None:
        """Closes the processors made for this partition (those with a ``close()``)."""
        for instance in self._instances:
            _close(instance)
        self._instances.clear()

    def task_done(self, request: TaskRequest) -> None:
        """Called once every stage of the task completed."""
        self._commit_control.complete(request.offset)
        self._metrics.record_latency(time.monotonic() - request.started)

    def track_deferred(self, request: TaskRequest, completion: Completion) -> None:
        self._commit_control.track_deferred(request.offset, completion, self._timeout.value)

    def _extract(self, request: TaskRequest) -> Any:
        """The task of stage 0, setting the request's metadata and task bytes: Decaton's default extraction
        (metadata from the ``dt_meta`` header, the value deserialized) or the pipeline's TaskExtractor."""
        record = request.record
        if self._extract_whole_record:
            extracted = self._extractor.extract(request.consumed_record(record[VALUE]))  # type: ignore[union-attr]
            request.wire = extracted.metadata.to_wire()
            request.task_bytes = extracted.task_data_bytes
            return extracted.task_data
        headers = record[HEADERS]
        data = record[VALUE]
        wire = metadata_header(headers) if headers else None
        if wire is None and self._legacy_fallback.value:
            wire, data = unwrap_legacy(data)
            request.task_bytes = data
        request.wire = wire
        if self._extractor is not None:  # a retried task: the extractor reads what it wrote at first
            extracted = self._extractor.extract(request.consumed_record(data))
            request.task_bytes = extracted.task_data_bytes
            return extracted.task_data
        return data if self._deserializer is None else self._deserializer(data)

    def _task(self, record: Record) -> tuple[TaskRequest, Any]:
        """The record's request and task; the task is _DROPPED (and completed) if extraction raised."""
        request = TaskRequest(record, self)
        try:
            return request, self._extract(request)
        except Exception as exc:
            log.error("%s", SerializationError(
                f"Dropping task at {self.topic}-{self.partition}@{request.offset}: reading it raised "
                f"{exc!r}. "
                "Fix the deserializer (or TaskExtractor) or the producer of this topic."))
            request.started = time.monotonic()
            request.close_stage()
            return request, _DROPPED

    def handle(self, record: Record) -> None:
        """Entry of a thread unit: reads the task, waits for its scheduled time (a retry's backoff) and the
        rate limit, then stage 0 (inlined, like in ``handle_async``: the fewer frames per task, the less a
        unit holds the GIL)."""
        request, task = self._task(record)
        if task is _DROPPED:
            return
        if request.wire is not None and (delay := request.due_ms / 1000 - time.time()) > 0:
            time.sleep(delay)
        if self._rate_limiter.limited():
            self._rate_limiter.acquire()
        request.started = time.monotonic()
        context = ProcessingContext(request, self, 0)
        try:
            self._fns[0](context, task)
        except Exception as exc:
            self._failed(request, 0, exc)
        if not context.deferred():
            request.close_stage()

    async def handle_async(self, record: Record) -> None:
        """Entry of an asyncio unit (stage 0 inlined: one coroutine less per task)."""
        request, task = self._task(record)
        if task is _DROPPED:
            return
        if request.wire is not None and (delay := request.due_ms / 1000 - time.time()) > 0:
            await asyncio.sleep(delay)
        if self._rate_limiter.limited():
            await self._rate_limiter.acquire_async()
        request.started = time.monotonic()
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
