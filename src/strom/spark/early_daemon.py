"""Spark's Python worker daemon, started with a local driver's JVM instead of at the first Python task.

Spark starts the daemon (``python -m <spark.python.daemon.module>``) when the first Python task runs,
and the daemon then imports pyspark and strom's executor modules (about a second of one core) before
it forks the task's worker: on the path to the first record, after the JVM's start and the first
job's planning. A local session that strom launches itself starts an interpreter beside the JVM that
imports all that meanwhile (``start``), and makes this module the daemon module: what Spark starts
then is a small stand-in that hands its standard streams, arguments and environment to the waiting
interpreter, which becomes the daemon (``strom.spark.runtime.daemon``) from there on, and stays to
pass Spark's stop (SIGTERM) on and to end with it.

The waiting interpreter only takes over when it would behave as a daemon Spark started: the same
Python, the same interpreter settings (``PYTHON*`` variables such as ``PYTHONHASHSEED``, the dynamic
linker's), and the same existing ``sys.path`` entries (so every module it imported resolves to the
same file); otherwise, and for every later daemon (another pool of workers, a second session), the
stand-in runs the daemon itself, as Spark would have.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["ADDRESS_VARIABLE", "MODULE", "start"]

MODULE = "strom.spark.early_daemon"
ADDRESS_VARIABLE = "STROM_EARLY_DAEMON"
"""The waiting interpreter's socket, in the daemon's environment (``spark.executorEnv.``)."""
_WAIT = "--wait"
_SETTINGS = re.compile(r"PYTHON[A-Z]+|LD_[A-Z_]+")
"""Variables the interpreter reads when it starts (``PYTHONPATH`` is compared as ``sys.path``)."""


_waiting: list[subprocess.Popen] = []
"""The waiting interpreters this process started: each ends when its standard input closes."""


def start(spark_home: Path) -> str | None:
    """Starts the waiting interpreter with the environment Spark gives a daemon (this process's, and
    the path and interpreter settings Spark adds: ``PythonWorkerFactory``'s); its socket's path, or
    None where it cannot start. It ends when this process does unless a daemon took it over."""
    if not hasattr(socket, "send_fds") or not hasattr(socket, "AF_UNIX"):
        return None
    library = spark_home / "python" / "lib"
    spark_path = [str(library / "pyspark.zip"), *map(str, sorted(library.glob("py4j-*-src.zip"))),
                  *map(str, sorted((spark_home / "jars").glob("spark-core_*.jar")))]
    path = [*spark_path, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "YES",
                   "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    _waiting[:] = [process for process in _waiting if process.poll() is None]  # reaps ended ones
    address = os.path.join(tempfile.mkdtemp(prefix="strom-daemon-"), "s")
    try:
        _waiting.append(subprocess.Popen([sys.executable, "-m", MODULE, _WAIT, address], env=environment,
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL))
    except OSError:
        return None
    return address


def _stand_in() -> None:
    """What Spark starts: hands over to the waiting interpreter, or runs the daemon itself."""
    connection = _hand_over(os.environ.get(ADDRESS_VARIABLE, ""))
    if connection is None:
        import runpy

        runpy.run_module("strom.spark.runtime.daemon", run_name="__main__", alter_sys=True)
        return
    daemon = int(connection.makefile("rb").readline())
    signal.signal(signal.SIGTERM, lambda *_: os.kill(daemon, signal.SIGTERM))  # Spark's stop
    while connection.recv(1):  # until the daemon ends (its end of the connection closes)
        pass


def _hand_over(address: str) -> socket.socket | None:
    """The connection to the waiting interpreter once it agreed to become this daemon, or None."""
    if not address:
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
        state = {"argv": sys.argv[1:], "environ": dict(os.environ), "cwd": os.getcwd(),
                 "executable": sys.executable, "prefix": sys.prefix, "path": sys.path}
        socket.send_fds(connection, [json.dumps(state).encode() + b"\n"], [0, 1, 2])
        if connection.recv(1) == b"y":
            return connection
    except OSError:
        pass
    connection.close()
    return None


def _wait(address: str) -> None:
    """The waiting interpreter: imports the daemon's modules, then serves one hand-over (or ends when
    the driver does). It listens first: a stand-in that comes early waits for the imports to end
    rather than doing them again."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a daemon the JVM starts: Ctrl-C is the driver's
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(4)
    try:
        import select

        import strom.spark.runtime.daemon  # noqa: F401 - what a daemon imports before it forks workers
        from strom.spark.startup import configure_worker_logging, mark

        configure_worker_logging()
        mark("daemon-imported", "early daemon waiting")
        while True:
            ready, _, _ = select.select([listener, sys.stdin], [], [])
            if sys.stdin in ready:
                return  # the driver ended (or closed our standard input) before a daemon came
            connection, _ = listener.accept()
            taken = _take_over(connection)
            if taken is not None:
                break
    finally:
        listener.close()
        Path(address).unlink(missing_ok=True)
        os.rmdir(os.path.dirname(address))
    _become_daemon(*taken)


def _take_over(connection: socket.socket) -> tuple[socket.socket, dict] | None:
    """The stand-in's state when this interpreter can be its daemon (its answer sent), else None."""
    stream = connection.makefile("rb")
    try:
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        line = message + (b"" if message.endswith(b"\n") else stream.readline())
        state = json.loads(line)
    except (OSError, ValueError):
        connection.close()
        return None
    if len(fds) != 3 or not _same_interpreter(state):
        for fd in fds:
            os.close(fd)
        connection.sendall(b"n")
        connection.close()
        return None
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    connection.sendall(b"y%d\n" % os.getpid())
    return connection, state


def _same_interpreter(state: dict) -> bool:
    def settings(environ: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in environ.items() if _SETTINGS.fullmatch(k) and k != "PYTHONPATH"}

    def existing(path: list[str]) -> list[str]:
        return [os.path.abspath(entry) for entry in path if os.path.exists(entry)]

    return (state["executable"] == sys.executable and state["prefix"] == sys.prefix
            and settings(state["environ"]) == settings(dict(os.environ))
            and existing(state["path"]) == existing(sys.path))


def _become_daemon(connection: socket.socket, state: dict) -> None:
    """From here on this is the daemon Spark started: its arguments, environment, directory, path."""
    os.environ.clear()
    os.environ.update(state["environ"])
    os.chdir(state["cwd"])
    sys.path[:] = state["path"]
    sys.argv[1:] = state["argv"]
    os.register_at_fork(after_in_child=connection.close)  # the stand-in waits for the daemon's end only
    from pyspark.daemon import manager

    from strom.spark.startup import configure_worker_logging, mark

    configure_worker_logging()
    mark("daemon-taken", "early daemon taken over by Spark's")
    manager()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == _WAIT:
        _wait(sys.argv[2])
    else:
        _stand_in()
