"""A local SparkSession sized for a small machine, with the "strom" data source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import nullcontext

from pyspark import SparkContext
from pyspark.sql import SparkSession

from strom.spark import quiet_logging
from strom.spark.connector.source import StromDataSource
from strom.spark.preflight import check_java
from strom.spark.startup import mark

__all__ = ["SMALL_MACHINE_DEFAULTS", "register", "session"]

SMALL_MACHINE_DEFAULTS: dict[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.driver.memory": "1g",
    # Python workers fork from a daemon that has strom's executor modules loaded already
    "spark.python.daemon.module": "strom.spark.runtime.daemon",
}


def register(spark: SparkSession) -> None:
    """Makes ``format("strom")`` available in ``spark`` (reads and writes, batch and streaming)."""
    spark.dataSource.register(StromDataSource)


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
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings = {**SMALL_MACHINE_DEFAULTS, "spark.ui.enabled": str(ui).lower(), **(config or {})}
    jvm_running = SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ
    if quiet and not jvm_running:
        options = "spark.driver.extraJavaOptions"
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
