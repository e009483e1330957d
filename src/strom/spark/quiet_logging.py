"""strom's log4j2 configuration for Spark's JVM: no start-up chatter, every actionable warning kept.

Spark's start-up notices (its default-profile and shell log-level lines, Hadoop's native-library
notice, the loopback-hostname notice) tell a strom user nothing they can act on, so the driver JVM
starts with this configuration: root at WARN (a memory warning or a lost executor still reaches the
terminal) with those notices denied, and Spark's three copies of a task's Python exception too (strom
reports an application's failure once, naming the record and the user's line). The JVM's own
``WARNING: Using incubator modules`` line comes before any logging (Spark's launcher always adds the
vector module), so it is dropped from the JVM's stderr while the gateway starts; every other line
passes through unchanged.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["LOG4J2_PROPERTIES", "config_file", "driver_java_options", "filtered_stderr",
           "jvm_lines_to", "jvm_stderr_filtered", "reconfigure", "unlog_strom_task_kills"]

LOG4J2_PROPERTIES = """\
# strom's log4j2 configuration for Spark (strom.spark.quiet_logging): warnings and errors on stderr,
# Spark's and Hadoop's start-up notices left out.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console

appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# One filter (a Console appender takes one): Spark's start-up notices, and its copies of a failed task's
# Python exception (the executor's, the task set's, the job's abort), which strom reports itself once,
# and the notices of a job strom cancels on stopping (its Python workers killed; or ended already)
# (`strom -v` keeps Spark's own logging). No backslash: .properties files read it as an escape.
appender.console.filter.quiet.type = RegexFilter
appender.console.filter.quiet.regex = (?s)(.*(resolves to a loopback address|Set SPARK_LOCAL_IP)|\
Exception in task [^ ]+ in stage |Lost task .*(PythonException|TaskKilled)|\
Incomplete task interrupted: Attempting to kill Python Worker|\
Task [0-9]+ in stage [^ ]+ failed [0-9]+ times; aborting job|\
Failed to cancel job group .*Cannot find active jobs).*
appender.console.filter.quiet.onMatch = DENY
appender.console.filter.quiet.onMismatch = NEUTRAL

# the shell's level equal to the root's: Spark then prints no "Setting default log level" notice
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = warn
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.jetty.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty.level = error
"""

_JVM_NOTICE = re.compile(rb"^WARNING: Using incubator modules: .*\n?$")


def config_file() -> Path:
    """The configuration as a file the JVM can read (written once per content, shared by processes)."""
    digest = hashlib.sha256(LOG4J2_PROPERTIES.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"strom-log4j2-{digest}.properties"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(LOG4J2_PROPERTIES)
        partial.replace(path)
    return path


def driver_java_options(existing: str | None) -> str:
    """``existing`` with strom's configuration added, unless it names a log4j2 configuration itself."""
    existing = (existing or "").strip()
    if "log4j2.configurationFile" in existing:
        return existing
    return f"-Dlog4j2.configurationFile={config_file().as_uri()} {existing}".strip()


def filtered_stderr() -> int | None:
    """A pipe's write end for a JVM's stderr: a daemon thread copies its lines to this process's
    stderr, all but the incubator-module notice; None without a usable stderr (nothing to keep quiet)."""
    try:
        sys.stderr.flush()
        target = os.dup(2)
    except (OSError, ValueError):
        return None
    read_end, write_end = os.pipe()
    threading.Thread(target=_copy_lines, args=(read_end, target), name="strom-jvm-stderr",
                     daemon=True).start()
    return write_end


@contextmanager
def jvm_stderr_filtered() -> Iterator[None]:
    """While pyspark launches the JVM, file descriptor 2 is a ``filtered_stderr`` pipe it inherits
    for life."""
    write_end = filtered_stderr()
    if write_end is None:
        yield
        return
    saved = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


_diverted_to: list[Callable[[str], object]] = []
"""Where the JVM's lines go instead of the terminal while a command shows a live line (the last one)."""


@contextmanager
def jvm_lines_to(write: Callable[[str], object]) -> Iterator[None]:
    """While inside, the filtered JVM stderr's lines (Spark's log, its Python workers' output) go to
    ``write``, e.g. the stand-in stderr of a live display that prints them above its line, instead of
    straight onto the terminal, into that line."""
    _diverted_to.append(write)
    try:
        yield
    finally:
        _diverted_to.remove(write)


def _copy_lines(read_end: int, target: int) -> None:
    with os.fdopen(read_end, "rb") as pipe:
        for line in iter(pipe.readline, b""):
            if not _JVM_NOTICE.match(line) and not _diverted(line):
                try:
                    os.write(target, line)
                except OSError:
                    return


def _diverted(line: bytes) -> bool:
    """Whether a diversion took the line (one that fails leaves it to the terminal: the JVM must never
    block on a full pipe)."""
    diversion = _diverted_to[-1:]
    if not diversion:
        return False
    try:
        diversion[0](line.decode(errors="replace"))
    except Exception:  # a display that ended meanwhile: the terminal takes the line
        return False
    return True


def reconfigure(spark_context: object) -> None:
    """Applies the configuration to a JVM started before strom (``spark-submit`` of an application):
    its start-up notices are printed already, later ones follow strom's configuration."""
    jvm = spark_context._jvm  # type: ignore[attr-defined]
    properties = jvm.java.lang.System.getProperty("log4j2.configurationFile")
    if properties:  # the user's own configuration (or strom's, given at spark-submit) stays
        return
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    context.setConfigLocation(jvm.java.net.URI(config_file().as_uri()))


TASK_SET_MANAGER = "org.apache.spark.scheduler.TaskSetManager"
STROM_TASK_KILLS = (r"(?s)Lost task .*TaskKilled \(Stage cancelled: .*job group "
                    r"strom-.*-[0-9a-f]{32}-[0-9]+\b.*")
"""Spark's account of a task of a real-time job strom cancelled (its job groups are
``strom-<application.id>-<run id>-<batch>``): a stream thread that did not stop in time, or retries of
lost ones."""


def unlog_strom_task_kills(spark_context: object) -> None:
    """Spark's task set manager logs no ``WARN Lost task ... TaskKilled`` for the tasks strom kills, also
    in a session whose logging is the user's (strom's configuration drops them already). A filter, not a
    level around the stop: Spark reports a kill when the executor has ended the task, after the job."""
    jvm = spark_context._jvm  # type: ignore[attr-defined]
    core = jvm.org.apache.logging.log4j.core
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    config = context.getConfiguration()
    logger = config.getLoggerConfig(TASK_SET_MANAGER)
    if logger.getName() != TASK_SET_MANAGER:
        logger = core.config.LoggerConfig(TASK_SET_MANAGER, None, True)  # the level stays its parent's
        config.addLogger(TASK_SET_MANAGER, logger)
    if STROM_TASK_KILLS in str(logger.getFilter()):  # once per configuration
        return
    result = getattr(core, "Filter$Result")
    logger.addFilter(core.filter.RegexFilter.createFilter(STROM_TASK_KILLS, None, False, result.DENY,
                                                          result.NEUTRAL))
    context.updateLoggers()
