"""What a processor sees of the task it handles: metadata, key, headers, and how it completes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from strom.errors import ConfigError
from strom.kafka.headers import Headers
from strom.tasks.completion import Completion, TimeoutChoice
from strom.tasks.protocol import WireMetadata

__all__ = [
    "ConsumedRecord", "DecatonTask", "ProcessingContext", "RawHeaders", "Record", "TaskMetadata",
    "TaskRequest", "record_of",
]

if TYPE_CHECKING:
    from strom.tasks.processors import ProcessPipeline

T = TypeVar("T")
RawHeaders = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class TaskMetadata:
    """Decaton's TaskMetadata, with where the task was read: ``timestamp_ms`` when it was produced (a
    DecatonClient's, else the record's), ``retry_count`` > 0 for a task delivered again through the retry
    topic, ``due_ms`` the time before which it is not processed (Decaton's scheduled time: a retry's
    backoff or a DecatonClient's schedule; 0: none), the source ids when a DecatonClient produced it.
    A TaskExtractor gives the wire fields; the subscription fills in topic, partition and offset."""

    topic: str = ""
    partition: int = -1
    offset: int = -1
    timestamp_ms: int = 0
    retry_count: int = 0
    due_ms: int = 0
    source_application_id: str | None = None
    source_instance_id: str | None = None

    def to_wire(self) -> WireMetadata:
        return WireMetadata(self.timestamp_ms, self.source_application_id or "",
                            self.source_instance_id or "", self.retry_count, self.due_ms)


@dataclass(frozen=True)
class ConsumedRecord:
    """Decaton's ConsumedRecord: what a TaskExtractor reads a task from."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers


@dataclass(frozen=True)
class DecatonTask(Generic[T]):
    """Decaton's DecatonTask: what a TaskExtractor returns. ``task_data_bytes`` is what a retry sends again
    (the retry topic's records are read with the same extractor)."""

    metadata: TaskMetadata
    task_data: T
    task_data_bytes: bytes


# A fetched record waiting for its unit: (offset, key, value, timestamp ms, headers or None), a plain tuple
# because the garbage collector stops tracking a tuple of bytes and ints at its first young collection.
# A confluent_kafka.Message stays tracked: thousands of them pending were promoted through every generation
# and made full collections (tens of ms with the GIL held) recur while tasks waited.
Record = tuple[int, bytes | None, bytes | None, int, RawHeaders | None]
OFFSET, KEY, VALUE, TIMESTAMP, HEADERS = range(5)


def record_of(msg: Any) -> Record:
    """The record of a confluent_kafka.Message."""
    return msg.offset(), msg.key(), msg.value(), msg.timestamp()[1], msg.headers()


_LOCK_POOL = [threading.Lock() for _ in range(64)]  # striped: a lock per request would cost an allocation


class TaskRequest:
    """One fetched record on its way through the pipeline; done when every stage completed. The unit that
    processes the record creates it, so it lives only while the task is open. ``wire`` is the task's
    Decaton metadata (None: the record carried none) and ``task_bytes`` what a retry sends again; the
    pipeline's extraction sets both."""

    __slots__ = ("_headers", "_open", "_shared", "offset", "pipeline", "record", "started", "task_bytes",
                 "wire")

    def __init__(self, record: Record, pipeline: ProcessPipeline) -> None:
        self.record = record
        self.offset: int = record[OFFSET]
        self.pipeline = pipeline
        self.wire: WireMetadata | None = None
        self.task_bytes = record[VALUE]
        self._headers: Headers | None = None
        self.started = 0.0
        self._open = 1
        self._shared = False

    @property
    def key(self) -> bytes | None:
        return self.record[KEY]

    @property
    def value(self) -> bytes | None:
        return self.record[VALUE]

    @property
    def headers(self) -> Headers:
        """The record's headers, made on first use; changes a processor makes go with a retry."""
        if self._headers is None:
            self._headers = Headers(self.record[HEADERS])
        return self._headers

    @property
    def due_ms(self) -> int:
        return 0 if self.wire is None else self.wire.scheduled_time_ms

    @property
    def metadata(self) -> TaskMetadata:
        pipeline, wire = self.pipeline, self.wire
        if wire is None:
            return TaskMetadata(pipeline.topic, pipeline.partition, self.offset, self.record[TIMESTAMP])
        return TaskMetadata(pipeline.topic, pipeline.partition, self.offset, wire.timestamp_ms,
                            wire.retry_count, wire.scheduled_time_ms, wire.source_application_id or None,
                            wire.source_instance_id or None)

    def consumed_record(self, value: bytes | None) -> ConsumedRecord:
        record = self.record
        return ConsumedRecord(self.pipeline.topic, self.pipeline.partition, self.offset, record[TIMESTAMP],
                              record[KEY], value, self.headers)

    def open_stage(self) -> None:
        """Opens a stage pushed after stage 0 (stage 0 is open from the start)."""
        with _LOCK_POOL[self.offset & 63]:
            self._open += 1

    def share(self) -> None:
        """Called before a completion may close a stage from another thread: from now on, lock."""
        self._shared = True

    def close_stage(self) -> None:
        if self._shared:
            with _LOCK_POOL[self.offset & 63]:
                self._open -= 1
                done = self._open == 0
        else:
            self._open -= 1
            done = self._open == 0
        if done:
            self.pipeline.task_done(self)


class ProcessingContext:
    """Given to ``process(context, task)``. Without ``defer_completion()`` or ``retry()`` the task
    completes when ``process`` returns."""

    __slots__ = ("_completion", "_pipeline", "_request", "_stage")

    def __init__(self, request: TaskRequest, pipeline: ProcessPipeline, stage: int) -> None:
        self._request = request
        self._pipeline = pipeline
        self._stage = stage
        self._completion: Completion | None = None

    def metadata(self) -> TaskMetadata:
        return self._request.metadata

    def key(self) -> bytes | None:
        return self._request.key

    def headers(self) -> Headers:
        return self._request.headers

    def defer_completion(self, on_timeout: Callable[[Completion], TimeoutChoice] | None = None) -> Completion:
        """The task stays pending after ``process`` returns until ``complete()`` is called (from any
        thread). At ``decaton.deferred.complete.timeout.ms`` ``on_timeout`` chooses GIVE_UP (complete
        it, the default) or EXTEND (wait another timeout)."""
        if self._completion is not None:
            return self._completion
        completion = Completion(on_timeout)
        self._completion = completion
        self._pipeline.track_deferred(self._request, completion)
        self._request.share()
        completion.when_complete(self._request.close_stage)
        return completion

    def deferred(self) -> bool:
        return self._completion is not None

    def push(self, task: Any) -> Any:
        """Hands ``task`` to the next processor of the pipeline. Returns that stage's Completion; from an
        ``async def`` processor, await it: ``await context.push(task)``."""
        return self._pipeline.run_stage(self._request, self._stage + 1, task)

    def retry(self) -> Completion:
        """Sends the task to the retry topic (``<topic>-retry``) to be processed again once the retry
        backoff passed (Decaton's); after ``strom.retry.max.attempts`` retries it goes to the dead letter
        topic instead (strom's extension). This task completes once the record is stored."""
        if not self._pipeline.retry_enabled:
            raise ConfigError("retry() needs a retry queue: call enable_retry() on the SubscriptionBuilder.")
        completion = self.defer_completion()
        self._pipeline.retry(self._request, completion)
        return completion
