"""What a processor sees of the task it handles: metadata, key, headers, and how it completes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.errors import ConfigError
from strom.tasks.commit_control import OffsetState
from strom.tasks.completion import Completion, TimeoutChoice

if TYPE_CHECKING:
    from strom.tasks.processors import ProcessPipeline

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class TaskMetadata:
    """Where a task came from; ``retry_count`` > 0 for a task delivered again through the retry topic."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    retry_count: int = 0
    due_ms: int = 0


class TaskRequest:
    """One fetched record on its way through the pipeline; done when every stage completed."""

    __slots__ = ("_lock", "_open", "headers", "key", "metadata", "offset_state", "on_done", "started",
                 "value")

    def __init__(self, metadata: TaskMetadata, key: bytes | None, value: bytes | None, headers: Headers,
                 offset_state: OffsetState, on_done: Callable[[TaskRequest], None]) -> None:
        self.metadata = metadata
        self.key = key
        self.value = value
        self.headers = headers
        self.offset_state = offset_state
        self.on_done = on_done
        self.started = 0.0
        self._open = 0
        self._lock = threading.Lock()

    def open_stage(self) -> None:
        with self._lock:
            self._open += 1

    def close_stage(self) -> None:
        with self._lock:
            self._open -= 1
            done = self._open == 0
        if done:
            self.offset_state.complete()
            self.on_done(self)


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
        state = self._request.offset_state
        state.deferred.append(completion)
        timeout_ms = self._pipeline.deferred_timeout_ms()
        if timeout_ms >= 0 and state.timeout_at < 0:
            state.timeout_at = time.monotonic() + timeout_ms / 1000
        completion.when_complete(self._request.close_stage)
        return completion

    def deferred(self) -> bool:
        return self._completion is not None

    def push(self, task: Any) -> Any:
        """Hands ``task`` to the next processor of the pipeline. Returns that stage's Completion; from an
        ``async def`` processor, await it: ``await context.push(task)``."""
        return self._pipeline.run_stage(self._request, self._stage + 1, task)

    def retry(self) -> Completion:
        """Sends the task to ``<subscription>-retry`` to be processed again after
        ``decaton.retry.backoff.ms``; after ``decaton.retry.max.attempts`` it goes to ``<subscription>-dlq``.
        This task completes once the retry record is stored."""
        if not self._pipeline.retry_enabled:
            raise ConfigError("retry() needs a retry queue: call enable_retry() on the SubscriptionBuilder.")
        completion = self.defer_completion()
        self._pipeline.retry(self._request, completion)
        return completion
