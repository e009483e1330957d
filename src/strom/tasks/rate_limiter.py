"""Token-bucket rate limiting per partition, following ``decaton.processing.rate.per.partition``."""

from __future__ import annotations

import asyncio
import threading
import time

from strom.tasks.properties import Property

__all__ = ["PAUSED", "UNLIMITED", "RateLimiter"]

UNLIMITED = -1
PAUSED = 0
_PAUSED_RECHECK_S = 0.1


class RateLimiter:
    """Allows ``rate`` acquisitions per second with a burst of one second's worth; the rate may change
    at any time (-1 unlimited, 0 paused: acquirers wait until it changes)."""

    def __init__(self, rate: Property, clock=time.monotonic) -> None:
        self._rate = rate
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = 0.0
        self._updated = clock()

    def limited(self) -> bool:
        return self._rate.value != UNLIMITED

    def _reserve(self) -> float:
        """Takes one token (possibly going into debt) and returns how long the caller must wait."""
        rate = self._rate.value
        if rate == UNLIMITED:
            return 0.0
        if rate == PAUSED:
            return -1.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(rate), self._tokens + (now - self._updated) * rate)
            self._updated = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / rate

    def acquire(self) -> None:
        while (wait := self._reserve()) < 0:
            time.sleep(_PAUSED_RECHECK_S)
        if wait:
            time.sleep(wait)

    async def acquire_async(self) -> None:
        while (wait := self._reserve()) < 0:
            await asyncio.sleep(_PAUSED_RECHECK_S)
        if wait:
            await asyncio.sleep(wait)
