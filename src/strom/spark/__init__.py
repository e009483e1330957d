"""strom.spark: Kafka source and sink for PySpark, and the runtime that runs topologies on Spark.

``strom.spark.session()`` gives a local SparkSession with ``format("strom")`` registered;
``strom.spark.register(spark)`` adds the format to a session you built yourself.
"""

from strom.spark.session import register, session

__all__ = ["register", "session"]
