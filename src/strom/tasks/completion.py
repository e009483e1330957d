"""Completion of a task: immediate, or deferred and finished later (possibly from another thread)."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

__all__ = ["Completion", "TimeoutChoice"]


class TimeoutChoice(enum.Enum):
    """What to do when a deferred completion is still open at ``decaton.deferred.complete.timeout.ms``."""

    GIVE_UP = "give_up"
    EXTEND = "extend"


class Completion:
    """A one-shot flag with callbacks. ``complete()`` may be called from any thread, more than once."""

    __slots__ = ("_callbacks", "_done", "_lock", "on_timeout")

    def __init__(self, on_timeout: Callable[[Completion], TimeoutChoice] | None = None) -> None:
        self._done = False
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.on_timeout = on_timeout

    def is_complete(self) -> bool:
        return self._done

    def complete(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def when_complete(self, callback: Callable[[], None]) -> None:
        """Runs ``callback`` once the completion is done (at once if it already is)."""
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback()

    def expire(self) -> bool:
        """Called at the deferred-completion timeout: True if it was given up (and is now complete)."""
        if self._done:
            return True
        choice = self.on_timeout(self) if self.on_timeout is not None else TimeoutChoice.GIVE_UP
        if choice is TimeoutChoice.GIVE_UP:
            self.complete()
            return True
        return False
