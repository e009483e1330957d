"""The key-ordered concurrency core: N units, each processing its items in order; a key always maps
to the same unit, so items with one key are handled in submission order while others run alongside.

Units are threads (for blocking handlers) or asyncio tasks on an :class:`AsyncRuntime` (for
``async def`` handlers). Nothing here knows about Kafka: the subscription and the stream operator
``map_values_concurrently`` both build on it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import uvloop

__all__ = ["AsyncRuntime", "KeyOrderedExecutor", "SubPartitioner"]

log = logging.getLogger(__name__)

_STOP = object()


class SubPartitioner:
    """Maps a key to a unit: ``hash(key) % concurrency``; records without a key go round-robin."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._round_robin = itertools.count()

    def partition_for(self, key: Any) -> int:
        if key is None:
            return next(self._round_robin) % self.concurrency
        return hash(key) % self.concurrency

    def group(self, items: Iterable[Any], key_of: Callable[[Any], Any]) -> dict[int, list[Any]]:
        """The items by unit, each unit's in the given order."""
        groups: dict[int, list[Any]] = {}
        partition_for = self.partition_for
        for item in items:
            unit = partition_for(key_of(item))
            group = groups.get(unit)
            if group is None:
                groups[unit] = [item]
            else:
                group.append(item)
        return groups


class AsyncRuntime:
    """An asyncio event loop (uvloop: several times less CPU per task switch than the default loop)
    running in its own daemon thread, hosting asynchronous units."""

    def __init__(self, name: str = "strom-async") -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()

    _shared: AsyncRuntime | None = None
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls) -> AsyncRuntime:
        """One process-wide runtime for callers that do not own one (stream operators)."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared.loop.is_closed():
                cls._shared = cls("strom-async-shared")
            return cls._shared


class _Unit:
    """Counters shared by both kinds of unit: ``submitted`` is written by the submitter only,
    ``processed`` by the unit only, so neither needs a lock."""

    def __init__(self) -> None:
        self.submitted = 0
        self.processed = 0
        self.discarding = False
        self.handing_back = False
        self.handed_back: list[Any] = []

    def skip(self, item: Any) -> bool:
        """True if ``item`` is not to be handled: dropped (discarding) or kept to hand back."""
        if self.handing_back:
            self.handed_back.append(item)
            return True
        return self.discarding

    def idle(self) -> bool:
        return self.submitted == self.processed

    def backlog(self) -> int:
        return self.submitted - self.processed


class _ThreadUnit(_Unit):
    """A thread taking lists of items from its queue: one queue hand-off (and wake-up) per list."""

    def __init__(self, handler: Callable[[Any], None], name: str) -> None:
        super().__init__()
        self._handler = handler
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put_all(self, items: list[Any]) -> None:
        self.submitted += len(items)
        self._queue.put(items)

    def _run(self) -> None:
        handler, get = self._handler, self._queue.get
        while (items := get()) is not _STOP:
            for item in items:
                if not ((self.handing_back or self.discarding) and self.skip(item)):
                    try:
                        handler(item)
                    except Exception:
                        log.exception("Unhandled error in unit %s", self._thread.name)
                self.processed += 1

    def signal_stop(self) -> None:
        self._queue.put(_STOP)

    def join(self, deadline: float) -> None:
        if threading.current_thread() is not self._thread:
            self._thread.join(max(0.0, deadline - time.monotonic()))


class _AsyncUnit(_Unit):
    def __init__(self, handler: Callable[[Any], Awaitable[None]]) -> None:
        super().__init__()
        self._handler = handler
        self.queue: deque = deque()
        self.running = False

    async def run(self) -> None:
        q, handler = self.queue, self._handler
        try:
            while q:
                item = q.popleft()
                if not ((self.handing_back or self.discarding) and self.skip(item)):
                    try:
                        await handler(item)
                    except Exception:
                        log.exception("Unhandled error in an asynchronous unit")
                self.processed += 1
        finally:
            self.running = False


class KeyOrderedExecutor:
    """Runs ``handler(item)`` for every submitted item, items of one key in order, up to
    ``concurrency`` at once. ``handler`` is a plain function (thread units) or, with ``runtime``
    given, an ``async def`` (asyncio units). Handlers should not raise; errors are logged."""

    def __init__(self, handler: Callable[[Any], Any], concurrency: int, *,
                 runtime: AsyncRuntime | None = None, name: str = "unit") -> None:
        self.concurrency = concurrency
        self._partitioner = SubPartitioner(concurrency)
        self._runtime = runtime
        self._inbox: deque[tuple[_AsyncUnit, list[Any]]] = deque()
        self._scheduled = False
        self._units: list[Any]
        if runtime is None:
            self._units = [_ThreadUnit(handler, f"{name}-{i}") for i in range(concurrency)]
        else:
            self._units = [_AsyncUnit(handler) for _ in range(concurrency)]

    @property
    def asynchronous(self) -> bool:
        return self._runtime is not None

    def submit(self, key: Any, item: Any) -> None:
        """Queues ``item`` on the unit of ``key``; never blocks."""
        self._hand_over({self._partitioner.partition_for(key): [item]})

    def submit_many(self, items: Iterable[Any], key_of: Callable[[Any], Any]) -> None:
        """Queues each item on the unit of ``key_of(item)``, in order; never blocks. Costs one hand-off per
        unit, not per item."""
        self._hand_over(self._partitioner.group(items, key_of))

    def _hand_over(self, groups: dict[int, list[Any]]) -> None:
        units = self._units
        if self._runtime is None:
            for index, items in groups.items():
                units[index].put_all(items)
            return
        for index, items in groups.items():
            unit = units[index]
            unit.submitted += len(items)
            self._inbox.append((unit, items))
        if not self._scheduled:
            self._scheduled = True
            self._runtime.loop.call_soon_threadsafe(self._dispatch)

    def _dispatch(self) -> None:
        # Reset the flag before draining: items appended after the drain see False and schedule
        # another dispatch (deque append/popleft are atomic, so no lock is needed).
        self._scheduled = False
        inbox = self._inbox
        create_task = self._runtime.loop.create_task  # type: ignore[union-attr]
        while inbox:
            unit, items = inbox.popleft()
            unit.queue.extend(items)
            if not unit.running:
                unit.running = True
                create_task(unit.run())

    def backlog(self) -> int:
        """Items submitted and not yet handled (queued or running)."""
        return sum(u.backlog() for u in self._units)

    def idle(self) -> bool:
        return all(u.idle() for u in self._units)

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Waits until every submitted item was handled; False if ``timeout_s`` passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = 0.0002
        while not self.idle():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
        return True

    def hand_back(self) -> None:
        """Asks the units to stop after their current item; the items still queued are kept and,
        once ``idle()``, returned by ``handed_back()`` (to move them to new units, e.g. on a
        concurrency change)."""
        for unit in self._units:
            unit.handing_back = True

    def handed_back(self) -> list[Any]:
        """The items queued when ``hand_back()`` was called; call once ``idle()`` is True."""
        return [item for unit in self._units for item in unit.handed_back]

    def close(self, discard_queued: bool = False, timeout_s: float = 5.0) -> None:
        """Stops the units after the queued items (or dropping them with ``discard_queued``)."""
        for unit in self._units:
            unit.discarding = discard_queued
        if self._runtime is None:
            deadline = time.monotonic() + timeout_s
            for unit in self._units:
                unit.signal_stop()
            for unit in self._units:
                unit.join(deadline)
        else:
            self.wait_idle(timeout_s)
