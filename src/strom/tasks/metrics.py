"""Per-partition metrics of a subscription: pending, queue-starved time, latency percentiles, commit lag."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PartitionMetrics", "PartitionMetricsSnapshot"]

_LATENCY_SAMPLES = 2048


@dataclass(frozen=True)
class PartitionMetricsSnapshot:
    topic: str
    partition: int
    pending: int
    completed: int
    queue_starved_s: float
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    commit_lag: int
    committed_offset: int
    paused: bool
    concurrency: int


class PartitionMetrics:
    """Latencies are written by units; counts and starvation by the subscription thread."""

    def __init__(self) -> None:
        self._latencies: deque[float] = deque(maxlen=_LATENCY_SAMPLES)
        self.completed = 0
        self._starved_since: float | None = time.monotonic()
        self._starved_total = 0.0
        # record_latency(seconds), called by units once per task: the deque's own append (atomic, so no
        # lock; the oldest sample drops out), so no Python frame per call
        self.record_latency: Callable[[float], None] = self._latencies.append

    def update_starvation(self, pending: int) -> None:
        """Queue-starved time: how long the partition had nothing to process (called by the subscription)."""
        now = time.monotonic()
        if pending == 0 and self._starved_since is None:
            self._starved_since = now
        elif pending > 0 and self._starved_since is not None:
            self._starved_total += now - self._starved_since
            self._starved_since = None

    def queue_starved_s(self) -> float:
        extra = 0.0 if self._starved_since is None else time.monotonic() - self._starved_since
        return self._starved_total + extra

    def latency_percentiles_ms(self) -> tuple[float, float, float]:
        samples = sorted(self._latencies.copy())
        if not samples:
            return 0.0, 0.0, 0.0
        def at(q: float) -> float:
            return samples[min(len(samples) - 1, int(q * len(samples)))] * 1000
        return at(0.5), at(0.99), samples[-1] * 1000
