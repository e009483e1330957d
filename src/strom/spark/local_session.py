"""A local SparkSession sized for a small machine, with the "strom" data source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from contextlib import nullcontext

from pyspark import SparkContext
from pyspark.sql import SparkSession

from strom.spark import driver_jvm, quiet_logging
from strom.spark.connector.source import StromDataSource
from strom.spark.driver_jvm import SMALL_MACHINE_DEFAULTS
from strom.spark.preflight import check_java
from strom.spark.startup import mark

__all__ = ["SMALL_MACHINE_DEFAULTS", "register", "session"]


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
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jvm_running = SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ
    early = None if jvm_running else driver_jvm.take(master, ui, config, quiet)
    if early is not None:  # launched as the command began (strom.spark.driver_jvm)
        SparkContext._gateway, settings = early
        SparkContext._jvm = SparkContext._gateway.jvm
    else:
        settings = driver_jvm.launch_settings(check_java(), master, ui, config or {}, quiet, jvm_running)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    launching = quiet and not jvm_running and early is None
    with quiet_logging.jvm_stderr_filtered() if launching else nullcontext():
        spark = builder.getOrCreate()
    mark("spark-session", "existing JVM" if jvm_running else "early JVM" if early else "created")
    if quiet and jvm_running:
        quiet_logging.reconfigure(spark.sparkContext)
    spark.sparkContext.setLogLevel(log_level)
    if strom_format:
        register(spark)
        mark("spark-registered")
    return spark
