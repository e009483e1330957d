"""Rate limits for log lines a client or a full resource can repeat without end."""

from __future__ import annotations

import time

LOG_INTERVAL_SECONDS = 10.0  # a repeated log line is written at most this often


class Throttle:
    """Lets a repeated event through at most once per `interval` seconds and counts the rest, so a
    log line that a flood of clients or retries triggers is written once, with how many it stands for."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = 0.0
        self._held = 0

    def ready(self) -> int | None:
        """The number of events held back since the last one let through, or None to hold this one."""
        now = time.monotonic()
        if now < self._next:
            self._held += 1
            return None
        held, self._held = self._held, 0
        self._next = now + self.interval
        return held
