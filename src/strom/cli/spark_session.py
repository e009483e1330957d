"""The Spark session of a command (`strom run`, `strom demo`): quiet unless ``strom -v`` asks for Spark's
own start-up notices (``-vv`` adds Spark's INFO log)."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import click

_MASTERS = {"run": "local[*]", "demo": "local[2]"}
"""The commands that start a Spark session, and their default masters (``strom run --master``'s, the
demo's): a session asking other than the early launch's guess only loses the early launch."""


def launch_jvm_early(args: list[str]) -> None:
    """``strom [-v] run|demo ...``: the local driver's JVM starts now, before the command's imports
    (``strom.spark.driver_jvm``); the command's session takes it when it asks what ``early_request``
    read from the command line."""
    request = early_request(args)
    if request is not None:
        from strom.spark import driver_jvm

        master, config, quiet = request
        driver_jvm.launch(master, config, quiet)


def early_request(args: list[str]) -> tuple[str, dict[str, str], bool] | None:
    """The master, ``--spark-conf`` settings and quiet logging (no ``-v``) a ``run`` or ``demo``
    command line asks for; None for another command or for help."""
    verbose = 0
    while args and re.fullmatch(r"-v+|--verbose", args[0]):
        verbose += 1 if args[0] == "--verbose" else len(args[0]) - 1
        args = args[1:]
    if not args or args[0] not in _MASTERS or {"-h", "--help"} & set(args):
        return None
    master, config = _MASTERS[args[0]], {}
    words = [word for arg in args[1:] for word in (arg.split("=", 1) if arg.startswith("--") else [arg])]
    for option, value in itertools.pairwise(words):  # a value naming an option is a mis-guess, no error
        if option == "--master":
            master = value
        elif option == "--spark-conf" and "=" in value:
            key, _, setting = value.partition("=")
            config[key.strip()] = setting.strip()
    return master, config, verbose == 0


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
    a command failing meanwhile exits at once, and the JVM with it.

    strom's modules that import pyspark (the session's and ``strom.spark.runtime``) are imported here,
    before the thread starts, so that the thread and the command never import pyspark at once:
    pyspark's package imports itself in a cycle, which a second thread importing it at the same moment
    breaks (``cannot import name 'SQLContext' from partially initialized module``). The thread would
    import them first anyway, while the JVM (launched as the command began) starts."""
    import strom.spark.local_session
    import strom.spark.runtime  # noqa: F401

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
