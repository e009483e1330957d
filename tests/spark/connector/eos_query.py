"""A streaming Spark SQL aggregation written exactly-once to Kafka.

Run as a script by test_exactly_once_restart.py, which SIGKILLs it at random points and restarts
it from its checkpoint: ``python eos_query.py BOOTSTRAP SOURCE SINK CHECKPOINT [GUARANTEE]``
(GUARANTEE defaults to exactly_once; at_least_once shows what the test catches).
"""

from __future__ import annotations

import sys

from pyspark.sql import functions as F

import strom.spark


def main(bootstrap: str, source: str, sink: str, checkpoint: str, guarantee: str = "exactly_once") -> None:
    # C1-only JIT and serial GC: this short-lived JVM starts faster and leaves the cores to the test.
    spark = strom.spark.session(app_name="strom-eos-restart", log_level="ERROR", config={
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    events = (spark.readStream.format("strom")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "300")
              .load())
    counts = events.groupBy("key").count()
    query = (counts.select("key", F.col("count").cast("string").alias("value"))
             .writeStream.format("strom")
             .outputMode("complete")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("topic", sink)
             .option("delivery.guarantee", guarantee)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)
             .start())
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
