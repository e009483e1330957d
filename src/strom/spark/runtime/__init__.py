"""Running strom topologies on Spark: one streaming query per sub-topology, one Spark task per
stream task and micro-batch, exactly-once through Kafka transactions (docs/runtime.md)."""

from strom.spark.runtime.spark_streams import (
    MAX_OFFSETS_PER_TRIGGER,
    SparkStreams,
    StreamsProgress,
    StreamThreadExceptionResponse,
    TaskProgress,
)

__all__ = ["MAX_OFFSETS_PER_TRIGGER", "SparkStreams", "StreamThreadExceptionResponse", "StreamsProgress",
           "TaskProgress"]
