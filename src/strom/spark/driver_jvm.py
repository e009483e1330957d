"""The local driver's JVM: the settings strom launches it with, and its launch as a command begins.

``strom run`` and ``strom demo`` import strom's layers, the application and pyspark (seconds of one
core) before they ask for a Spark session, whose JVM then takes seconds more to start. ``launch``,
called first thing by such a command, starts that JVM (Spark's ``spark-submit ... pyspark-shell``, as
pyspark launches it, with the settings ``launch_settings`` gives) in a thread, so that it starts on
the other core while Python imports. ``strom.spark.session`` then ``take``s it: only when it asks for
the same master, Spark settings and logging the launch was made for, with the same environment (the
JVM's, which its Python workers inherit); otherwise it stops that JVM and launches its own, as
without an early launch. A JVM never taken ends with the command (stopped at exit).

Only a ``local`` master without a user's ``PYSPARK_SUBMIT_ARGS`` (a launch of the user's own making)
gets an early launch.
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strom.spark import class_archive, early_daemon, quiet_logging
from strom.spark.preflight import JavaRuntime, check_java
from strom.spark.startup import mark

log = logging.getLogger(__name__)

__all__ = ["SMALL_MACHINE_DEFAULTS", "launch", "launch_settings", "spark_home", "take"]

DAEMON_MODULE = "spark.python.daemon.module"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
SMALL_MACHINE_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.driver.memory": "1g",
    # Python workers fork from a daemon that has strom's executor modules loaded already
    DAEMON_MODULE: "strom.spark.runtime.daemon",
}

# a local driver JVM is strom's coordinator (the stream threads run in Python workers): C2's compiling
# costs seconds of CPU at start-up that its steady state does not win back
LOCAL_JIT = "-XX:TieredStopAtLevel=1"


def spark_home() -> Path:
    """``SPARK_HOME``, or pip's pyspark (found without importing it), or where pyspark finds it."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")
        home = spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else ""
    if home and (Path(home) / "bin" / "spark-submit").is_file():
        return Path(home)
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def launch_settings(java: JavaRuntime, master: str, ui: bool, config: Mapping[str, str], quiet: bool,
                    jvm_running: bool) -> dict[str, str]:
    """The session's Spark settings: strom's small-machine defaults and the user's ``config`` over them;
    for a local JVM strom launches, its class archive, compiler and early Python worker daemon
    (``_local``); with ``quiet``, strom's logging configuration."""
    settings = {**SMALL_MACHINE_DEFAULTS, "spark.ui.enabled": str(ui).lower(), **config}
    if master.startswith("local") and not jvm_running:
        _local(java, spark_home(), settings)
    if quiet and not jvm_running:
        settings[JAVA_OPTIONS] = quiet_logging.driver_java_options(settings.get(JAVA_OPTIONS))
    return settings


def _local(java: JavaRuntime, home: Path, settings: dict[str, str]) -> None:
    """A local driver JVM maps its classes from strom's class-data-sharing archive
    (``strom.spark.class_archive``) and compiles with C1 only (``LOCAL_JIT``) unless the user's options
    choose a compiler (the user's options come after, and win); the Python worker daemon's imports run
    while the JVM starts (``strom.spark.early_daemon``) unless the user chose another daemon module."""
    user = settings.get(JAVA_OPTIONS, "")
    archive = class_archive.driver_java_options(java, home, settings.get("spark.driver.extraClassPath", ""),
                                                user)
    jit = "" if "Tiered" in user else LOCAL_JIT
    settings[JAVA_OPTIONS] = " ".join(option for option in (archive, jit, user) if option)
    if settings[DAEMON_MODULE] == SMALL_MACHINE_DEFAULTS[DAEMON_MODULE]:
        address = early_daemon.start(home)
        if address is not None:
            settings[DAEMON_MODULE] = early_daemon.MODULE
            settings[f"spark.executorEnv.{early_daemon.ADDRESS_VARIABLE}"] = address


@dataclass(frozen=True)
class _Request:
    """What a session asks of its JVM: the early launch serves a session asking the same."""

    master: str
    ui: bool
    config: tuple[tuple[str, str], ...]
    quiet: bool

    @classmethod
    def of(cls, master: str, ui: bool, config: Mapping[str, str] | None, quiet: bool) -> _Request:
        return cls(master, ui, tuple(sorted((config or {}).items())), quiet)


@dataclass
class _Launched:
    """A JVM launched early: its process, the settings it was launched with, and its gateway's address."""

    process: subprocess.Popen
    settings: dict[str, str]
    environment: dict[str, str]
    spawned_ns: int
    listening_ns: int = 0
    port: int = 0
    secret: str = field(default="", repr=False)


_early: tuple[_Request, Future[_Launched | None]] | None = None
"""The early launch of this process (one at most), until a session takes it."""
_untaken: list[subprocess.Popen] = []
"""Its JVM from its spawn until a session takes it: stopped at exit (none spawned after that)."""
_exiting = False
_lock = threading.Lock()


def launch(master: str, config: Mapping[str, str] | None = None, quiet: bool = True,
           ui: bool = False) -> None:
    """Starts the local driver's JVM in a thread, for a session asking ``master``, ``config``,
    ``quiet`` and ``ui`` later; does nothing where an early launch does not apply (a master not
    local, a user's ``PYSPARK_SUBMIT_ARGS``, a JVM launched already, no Spark home found)."""
    global _early
    if (_early is not None or not master.startswith("local") or "PYSPARK_SUBMIT_ARGS" in os.environ
            or "PYSPARK_GATEWAY_PORT" in os.environ):
        return
    request = _Request.of(master, ui, config, quiet)
    try:
        spark_home()  # where finding it imports pyspark, the command's thread does it, never the launch's
    except (Exception, SystemExit):  # pyspark's search exits when it finds none: the session's launch says
        return
    future: Future[_Launched | None] = Future()
    _early = (request, future)
    atexit.register(_stop_untaken)
    threading.Thread(target=_launch_into, args=(request, future), name="strom-jvm-launch",
                     daemon=True).start()


def _launch_into(request: _Request, future: Future[_Launched | None]) -> None:
    try:
        future.set_result(_launch(request))
    except BaseException as exc:  # the session launches its own JVM, and meets the failure there
        future.set_exception(exc)


def _launch(request: _Request) -> _Launched | None:
    java = check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # as the session sets it, before the JVM
    settings = launch_settings(java, request.master, request.ui, dict(request.config), request.quiet,
                               jvm_running=False)
    home = spark_home()
    command = [str(home / "bin" / "spark-submit"), "--conf", f"spark.master={request.master}"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    info = Path(tempfile.mkdtemp(prefix="strom-jvm-")) / "gateway"
    inherited = dict(os.environ)
    environment = {**inherited, "SPARK_CONNECT_MODE": "0", "_PYSPARK_DRIVER_CONN_INFO_PATH": str(info)}
    stderr = quiet_logging.filtered_stderr() if request.quiet else None
    try:
        with _lock:
            if _exiting:
                return None
            process = subprocess.Popen([*command, "pyspark-shell"], stdin=subprocess.PIPE, stderr=stderr,
                                       env=environment, preexec_fn=_ignore_interrupts)
            _untaken.append(process)
    finally:
        if stderr is not None:
            os.close(stderr)
    launched = _Launched(process, settings, inherited, time.time_ns())
    try:
        launched.port, launched.secret = _gateway_address(info, process)
    finally:
        shutil.rmtree(info.parent, ignore_errors=True)
    launched.listening_ns = time.time_ns()
    return launched


def _ignore_interrupts() -> None:
    """Ctrl-C is the command's to handle (it stops the application first), as pyspark's launch has it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _gateway_address(info: Path, process: subprocess.Popen) -> tuple[int, str]:
    """The port and secret the JVM's gateway writes once it listens (a 4-byte port, then the secret's
    length and UTF-8 bytes); raises if the JVM ends first."""
    while not info.is_file():
        if process.poll() is not None:
            raise RuntimeError(f"Spark's JVM ended with status {process.returncode} before its "
                               "gateway listened")
        time.sleep(0.05)
    data = info.read_bytes()
    port, length = struct.unpack(">ii", data[:8])
    return port, data[8:8 + length].decode()


def take(master: str, ui: bool, config: Mapping[str, str] | None,
         quiet: bool) -> tuple[Any, dict[str, str]] | None:
    """The early JVM's gateway (pyspark's, connected) and its settings, when it was launched for this
    ``master``, ``ui``, ``config`` and ``quiet``, with the environment this process has now; else None
    (a JVM launched for another session is stopped; the session launches its own)."""
    global _early
    if _early is None:
        return None
    (request, future), _early = _early, None
    try:
        launched = future.result()
    except Exception:
        return None  # the session's own launch says what fails
    if launched is None:
        return None
    with _lock:
        _untaken.remove(launched.process)
    changed = sorted(k for k in {*os.environ, *launched.environment}
                     if os.environ.get(k) != launched.environment.get(k))
    if request != _Request.of(master, ui, config, quiet) or changed:
        # launched for another session, or before the command set variables its JVM (and the Python
        # workers it starts) would inherit: this session's JVM is launched as without an early one
        log.debug("early JVM not taken: %s", f"{changed} set since" if changed else "another request")
        _stop(launched.process)
        return None
    # marked now: logging is set up by the time a session asks (the command's, the application's)
    mark("jvm-launched", f"JVM process {launched.process.pid}", at_ns=launched.spawned_ns)
    mark("jvm-gateway", "early JVM's gateway listening", at_ns=launched.listening_ns)
    gateway = _connect(launched)
    threading.Thread(target=warm_up, args=(gateway.jvm,), name="strom-jvm-warm-up", daemon=True).start()
    return gateway, launched.settings


WARM_UP_DDL = "thread INT, tasks ARRAY<STRING>, records BIGINT"


def warm_up(jvm: Any) -> None:
    """Spark SQL's first session and first query spend seconds of one core on work that needs no
    SparkContext: the built-in functions' registry, the SQL parser, the code generator's compiler
    (Janino), Arrow's allocator, Scala's runtime reflection (Spark SQL's encoders). Called in a
    thread of its own as the session creates its SparkContext (one JVM thread, loading Spark's core
    classes), that work runs on another core and is done when the session and the first query ask
    for it. Each piece is static and idempotent; the first that fails ends the warm-up, logged at DEBUG
    (the session meets any real failure itself)."""
    pieces = {
        "function registry": lambda: jvm.org.apache.spark.sql.catalyst.analysis.FunctionRegistry.builtin(),
        "SQL parser": lambda: jvm.org.apache.spark.sql.types.StructType.fromDDL(WARM_UP_DDL),
        "code generator's compiler": lambda: jvm.org.codehaus.janino.ClassBodyEvaluator().cook(
            "public int one() { return 1; }"),
        "Arrow allocator": lambda: jvm.org.apache.spark.sql.util.ArrowUtils.rootAllocator(),
        "Scala reflection": lambda: getattr(getattr(jvm.org.apache.spark.sql.catalyst, "ScalaReflection$"),
                                            "MODULE$").universe(),
    }
    for name, piece in pieces.items():
        try:
            piece()
        except Exception as error:  # a warm-up only: the session meets real failures itself
            log.debug("JVM warm-up: %s failed: %s", name, error)
            return
    mark("jvm-warmed", ", ".join(pieces))


def _connect(launched: _Launched) -> Any:
    """pyspark's own gateway, connected to the running JVM (its launch reads the JVM's address from
    these variables, which are removed again: Spark's later processes must not inherit them)."""
    from pyspark import java_gateway

    os.environ["PYSPARK_GATEWAY_PORT"] = str(launched.port)
    os.environ["PYSPARK_GATEWAY_SECRET"] = launched.secret
    try:
        gateway = java_gateway.launch_gateway()
    finally:
        del os.environ["PYSPARK_GATEWAY_PORT"], os.environ["PYSPARK_GATEWAY_SECRET"]
    gateway.proc = launched.process
    return gateway


def _stop_untaken() -> None:
    """At exit: a JVM launched early that no session took (the command failed first) ends now."""
    global _exiting
    with _lock:
        _exiting = True
        untaken = list(_untaken)
    for process in untaken:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()
