"""Micro-batch execution (``execution.mode=microbatch``): one Spark micro-batch per commit.

The application runs as one Spark streaming query: its source (``strom-stream-tasks``) plans one
input partition per stream task of every sub-topology, ``mapInArrow`` runs the stream task in
the same Spark task (no shuffle), and ``foreachBatch`` collects one summary row per task for the
progress figures. The trigger interval is ``commit.interval.ms``: every micro-batch ends in a
commit. (One query for all sub-topologies, not one each: every query costs Spark a Python
source process and a job per trigger, which a small machine feels.)
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from strom.spark.runtime.executor import SUMMARY_DDL, BatchSink
from strom.spark.runtime.microbatch_source import FORMAT, PLAN_OPTION, SourcePlan, StreamTaskSource
from strom.spark.runtime.microbatch_task import StreamTaskRunner
from strom.spark.runtime.worker_pool import own_worker_pool
from strom.streams.processor.topology import Topology

__all__ = ["MicroBatchExecution"]

_STOP_WAIT_S = 60.0


class MicroBatchExecution:
    """The streaming query of one ``SparkStreams.start()``."""

    def __init__(self, spark: SparkSession, topology: Topology, props: dict[str, Any], run_id: str,
                 source: SourcePlan, app_dir: Path, trigger_ms: int, on_batch: BatchSink) -> None:
        self._stop_file = Path(source.stop_file)
        self._trigger_ms = trigger_ms
        self._on_batch = on_batch
        spark.dataSource.register(StreamTaskSource)
        checkpoint = app_dir / "spark-checkpoint"
        shutil.rmtree(checkpoint, ignore_errors=True)  # committed Kafka offsets say where to resume
        self._stop_file.unlink(missing_ok=True)
        summaries = spark.readStream.format(FORMAT).option(PLAN_OPTION, source.to_json()).load()
        with own_worker_pool(spark):
            summaries = summaries.mapInArrow(StreamTaskRunner(topology, props, run_id), SUMMARY_DDL)
        self.query: StreamingQuery = (summaries.writeStream
                                      .queryName(source.application_id)
                                      .foreachBatch(self._record_batch)
                                      .trigger(processingTime=f"{trigger_ms} milliseconds")
                                      .option("checkpointLocation", str(checkpoint))
                                      .start())

    @property
    def is_active(self) -> bool:
        return self.query.isActive

    def exception(self) -> Exception | None:
        return self.query.exception()

    def _record_batch(self, df: DataFrame, batch_id: int) -> None:
        self._on_batch(df.collect())

    def stop(self) -> None:
        """Stops planning micro-batches, lets a running one commit (the trigger goes quiet), then
        stops the query."""
        self._stop_file.touch()
        deadline = time.monotonic() + _STOP_WAIT_S
        idle_since: float | None = None
        quiet = max(0.5, 2 * self._trigger_ms / 1000)
        while self.query.isActive and time.monotonic() < deadline:
            now = time.monotonic()
            if self.query.status["isTriggerActive"]:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since > quiet:
                break
            time.sleep(0.05)
        self.query.stop()
        self._stop_file.unlink(missing_ok=True)
