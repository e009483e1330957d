"""A local SparkSession sized for a small machine, with the "strom" data source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from strom.spark import class_archive, early_daemon, quiet_logging
from strom.spark.connector.source import StromDataSource
from strom.spark.preflight import JavaRuntime, check_java
from strom.spark.startup import mark

__all__ = ["SMALL_MACHINE_DEFAULTS", "register", "session"]

DAEMON_MODULE = "spark.python.daemon.module"
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


def register(spark: SparkSession) -> None:
    """Makes ``format("strom")`` available in ``spark`` (reads and writes, batch and streaming)."""
    spark.dataSource.register(StromDataSource)


def _local_driver_java_options(java: JavaRuntime, settings: Mapping[str, str]) -> str:
    """A local driver JVM that strom launches maps its classes from strom's class-data-sharing
    archive (``strom.spark.class_archive``) and compiles with C1 only (``LOCAL_JIT``) unless the
    user's options choose a compiler; the user's options come after, and win."""
    from pyspark.find_spark_home import _find_spark_home

    user = settings.get("spark.driver.extraJavaOptions", "")
    archive = class_archive.driver_java_options(java, Path(_find_spark_home()),
                                                settings.get("spark.driver.extraClassPath", ""), user)
    jit = "" if "Tiered" in user else LOCAL_JIT
    return " ".join(option for option in (archive, jit, user) if option)


def _start_daemon_early(settings: dict[str, str]) -> None:
    """The Python worker daemon's imports run while the JVM starts (``strom.spark.early_daemon``)."""
    from pyspark.find_spark_home import _find_spark_home

    address = early_daemon.start(Path(_find_spark_home()))
    if address is not None:
        settings[DAEMON_MODULE] = early_daemon.MODULE
        settings[f"spark.executorEnv.{early_daemon.ADDRESS_VARIABLE}"] = address


def session(
    app_name: str = "strom",
    master: str = "local[2]",
    ui: bool = False,
    config: Mapping[str, str] | None = None,
    log_level: str = "WARN",
    quiet: bool = True,
    strom_format: bool = True,
) -> SparkSession:
    """Checks Java first (a clear error instead of a JVM trace), then builds and registers.

    ``strom_format=False`` leaves ``format("strom")`` unregistered: registering a Python data source
    makes Spark start a Python process that looks for others among the installed packages (seconds
    on a busy machine), which a session only running ``SparkStreams`` does not need (``strom run``).

    Python workers run this interpreter, so executors see the same strom and dependencies. ``quiet``
    starts the JVM with strom's log4j2 configuration (``strom.spark.quiet_logging``: no start-up
    chatter, warnings kept); ``quiet=False`` keeps Spark's own (``strom -v``).
    """
    java = check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {**SMALL_MACHINE_DEFAULTS, "spark.ui.enabled": str(ui).lower(), **(config or {})}
    jvm_running = SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ
    options = "spark.driver.extraJavaOptions"
    if master.startswith("local") and not jvm_running:
        settings[options] = _local_driver_java_options(java, settings)
        if settings[DAEMON_MODULE] == SMALL_MACHINE_DEFAULTS[DAEMON_MODULE]:
            _start_daemon_early(settings)
    if quiet and not jvm_running:
        settings[options] = quiet_logging.driver_java_options(settings.get(options))
    for key, value in settings.items():
        builder = builder.config(key, value)
    with quiet_logging.jvm_stderr_filtered() if quiet and not jvm_running else nullcontext():
        spark = builder.getOrCreate()
    mark("spark-session", "created" if not jvm_running else "existing JVM")
    if quiet and jvm_running:
        quiet_logging.reconfigure(spark.sparkContext)
    spark.sparkContext.setLogLevel(log_level)
    if strom_format:
        register(spark)
        mark("spark-registered")
    return spark
