"""strom.spark: Kafka source and sink for PySpark, and the runtime that runs topologies on Spark.

``strom.spark.session()`` gives a local SparkSession with ``format("strom")`` registered;
``strom.spark.register(spark)`` adds the format to a session you built yourself.
Both load pyspark on first use, so importing ``strom.spark.preflight`` (as every CLI command
does) stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register", "session"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from strom.spark import local_session

        return getattr(local_session, name)
    raise AttributeError(f"module 'strom.spark' has no attribute {name!r}")
