"""The Spark session of a command (`strom run`, `strom demo`): quiet unless ``strom -v`` asks for Spark's
own start-up notices (``-vv`` adds Spark's INFO log)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import click


def verbosity() -> int:
    """How many ``-v`` the ``strom`` command line gave (0 outside a command)."""
    context = click.get_current_context(silent=True)
    return int(context.find_root().params.get("verbose", 0) or 0) if context is not None else 0


def spark_session(app_name: str, master: str = "local[2]", config: Mapping[str, str] | None = None,
                  strom_format: bool = True) -> Any:
    """Spark is imported here, when a command needs it."""
    return _session(app_name, master, config, strom_format, verbosity())


def spark_session_starting(app_name: str, master: str = "local[2]", config: Mapping[str, str] | None = None,
                           strom_format: bool = True) -> Future[Any]:
    """The session, built in a thread of its own so that the JVM starts (seconds) while the command
    does other work (its embedded broker); the future raises the session's failure. A daemon thread:
    a command failing meanwhile exits at once, and the JVM with it."""
    verbose = verbosity()  # the command's context is this thread's
    future: Future[Any] = Future()

    def build() -> None:
        try:
            future.set_result(_session(app_name, master, config, strom_format, verbose))
        except BaseException as exc:  # the taker raises it
            future.set_exception(exc)

    threading.Thread(target=build, name="strom-spark-session", daemon=True).start()
    return future


def _session(app_name: str, master: str, config: Mapping[str, str] | None, strom_format: bool,
             verbose: int) -> Any:
    import strom.spark

    return strom.spark.session(app_name=app_name, master=master, config=config,
                               log_level="INFO" if verbose > 1 else "WARN", quiet=verbose == 0,
                               strom_format=strom_format)
