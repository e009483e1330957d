"""The pool of Spark Python workers that run stream tasks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

__all__ = ["WORKER_POOL_VARIABLE", "own_worker_pool"]

WORKER_POOL_VARIABLE = "STROM_STREAM_TASKS"


@contextmanager
def own_worker_pool(spark: SparkSession) -> Iterator[None]:
    """Python functions created inside get the pool of Spark Python workers of stream tasks.

    Spark pools reused workers by their environment and hands out the idle one that waited
    longest. Sharing a pool with the source's readers, a task's next batch almost never gets the
    worker that keeps the task open; in the stream tasks' own pool it often does. (One pool for
    every application of the session: a pool per application would start its own worker daemon
    and workers with each application.)
    """
    environment = spark.sparkContext.environment
    environment[WORKER_POOL_VARIABLE] = "1"
    try:
        yield
    finally:
        environment.pop(WORKER_POOL_VARIABLE, None)
