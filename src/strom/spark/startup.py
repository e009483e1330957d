"""Start-up phase marks: DEBUG lines on logger ``strom.startup`` saying when each phase of the path
from ``start()`` to the first record ended (``bench/startup.py`` reads them; docs/runtime.md#start-up).

Driver and stream threads both log them; a Spark Python worker logs them when its daemon was started
with ``STROM_WORKER_LOG_LEVEL=DEBUG`` in the environment (``strom.spark.runtime.daemon``).
"""

from __future__ import annotations

import logging
import os
import time

__all__ = ["WORKER_LOG_LEVEL_VARIABLE", "configure_worker_logging", "mark", "process_age_s"]

log = logging.getLogger("strom.startup")

WORKER_LOG_LEVEL_VARIABLE = "STROM_WORKER_LOG_LEVEL"


def mark(phase: str, detail: str = "", at_ns: int | None = None) -> None:
    """``phase`` just ended (or ended at ``at_ns``, ``time.time_ns()``'s, when marked later); the line
    carries the wall-clock time, comparable across processes."""
    if log.isEnabledFor(logging.DEBUG):
        ms = (at_ns or time.time_ns()) // 1_000_000  # truncated, never rounded up past the moment
        log.debug("phase %s at %d.%03d pid %d %s", phase, ms // 1000, ms % 1000, os.getpid(), detail)


def process_age_s() -> float | None:
    """Seconds since this process started (Linux), for a Python worker's start-up; None elsewhere."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as stat:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            up_s = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return up_s - started_ticks / os.sysconf("SC_CLK_TCK")


def configure_worker_logging() -> None:
    """A Python worker daemon's logging: ``STROM_WORKER_LOG_LEVEL`` (e.g. DEBUG) to stderr, which Spark
    copies to the driver's; without it workers keep Python's default (warnings)."""
    level = os.environ.get(WORKER_LOG_LEVEL_VARIABLE)
    if level:
        logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
