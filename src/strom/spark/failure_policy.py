"""What a SparkStreams application does when its code raises and no handler is set in code: the
``strom.uncaught.exception.handler`` config (``strom run --on-failure restart|shutdown``).

``REPLACE_THREAD`` starts the failed stream tasks again from the committed offsets, as a Spark user
expects of a task retry, but not forever: each replacement waits a back-off (1 s, doubling up to 30 s;
``delay_s``, which SparkStreams waits without blocking the thread that asked, so a status line and
Ctrl-C stay live) and at most ``MAX_REPLACEMENTS`` replacements are made within ``WINDOW_S``; the next
failure in that window stops the application with its error (a crash loop ends). ``SHUTDOWN_CLIENT`` and
``SHUTDOWN_APPLICATION`` stop it at the first error (Kafka Streams' default, also without the key).
A dotted path names a function of yours, ``handler(exception) -> StreamThreadExceptionResponse``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from strom.streams import config as cfg
from strom.streams.config import HANDLER_RESPONSES as RESPONSES
from strom.streams.config import UNCAUGHT_EXCEPTION_HANDLER

__all__ = ["MAX_REPLACEMENTS", "RESPONSES", "UNCAUGHT_EXCEPTION_HANDLER", "WINDOW_S", "ReplacingHandler",
           "configured_handler", "failure_summary"]

log = logging.getLogger(__name__)

MAX_REPLACEMENTS = 3
"""Replacements allowed within ``WINDOW_S``; the next failure stops the application."""
WINDOW_S = 600.0
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0


class ReplacingHandler:
    """REPLACE_THREAD with a growing back-off, until ``max_replacements`` within ``window_s``; after an
    answer of REPLACE_THREAD, ``delay_s`` is the back-off to wait before replacing."""

    def __init__(self, application_id: str, max_replacements: int = MAX_REPLACEMENTS,
                 window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._application_id = application_id
        self._max = max_replacements
        self._window_s = window_s
        self._clock = clock
        self._replaced_at: list[float] = []
        self.delay_s = 0.0

    def __call__(self, error: Exception) -> Any:
        from strom.spark.runtime.spark_streams import StreamThreadExceptionResponse as Response

        now = self._clock()
        self._replaced_at = [t for t in self._replaced_at if now - t < self._window_s]
        if len(self._replaced_at) >= self._max:
            log.error("Application %s failed again after %d replacements within %.0f s; it stops (the limit "
                      "of REPLACE_THREAD): %s", self._application_id, len(self._replaced_at), self._window_s,
                      failure_summary(error))
            return Response.SHUTDOWN_CLIENT
        self._replaced_at.append(now)
        self.delay_s = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (len(self._replaced_at) - 1))
        log.warning("Application %s failed (%s); replacing its stream threads in %.0f s, from the committed "
                    "offsets (replacement %d of at most %d within %.0f s)", self._application_id,
                    failure_summary(error), self.delay_s, len(self._replaced_at), self._max, self._window_s)
        return Response.REPLACE_THREAD


def configured_handler(config: cfg.StreamsConfig) -> Callable[[Exception], Any] | None:
    """The handler the config names (None: none, Kafka Streams' default of stopping)."""
    setting = config[UNCAUGHT_EXCEPTION_HANDLER]
    if setting is None:
        return None
    if setting == "REPLACE_THREAD":
        return ReplacingHandler(config.application_id)
    if setting in RESPONSES:
        return _answering(setting)
    return _normalised(setting)


def _answering(name: str) -> Callable[[Exception], Any]:
    def handler(_error: Exception) -> Any:
        from strom.spark.runtime.spark_streams import StreamThreadExceptionResponse

        return StreamThreadExceptionResponse[name]
    return handler


def _normalised(function: Callable[[Exception], Any]) -> Callable[[Exception], Any]:
    """A user's function may answer a response's name as well as the response."""
    def handler(error: Exception) -> Any:
        from strom.spark.runtime.spark_streams import StreamThreadExceptionResponse

        response = function(error)
        return StreamThreadExceptionResponse[response.upper()] if isinstance(response, str) else response
    return handler


_RAISED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): .+")


def failure_summary(error: BaseException) -> str:
    """What was raised, in one line, for a log line or the error a user reads: a Python worker's failure
    carries its traceback (and Spark's JVM frames), whose last ``SomeError: message`` line says it."""
    lines = str(error).strip().splitlines()
    raised = [line for line in lines if _RAISED.match(line)]
    summary = raised[-1] if raised else (lines[0] if lines else type(error).__name__)
    return summary.removeprefix("strom.errors.")
