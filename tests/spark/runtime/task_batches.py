"""Running single task batches without Spark: a counting topology, its setup, one batch."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa

from strom.kafka import clients
from strom.spark.connector.reader import OffsetRange, ReadSettings, read_range
from strom.spark.connector.source import kafka_schema
from strom.spark.runtime.microbatch_task import BatchPlan, TaskAttempt
from strom.spark.runtime.plan import create_internal_topics, plan_application
from strom.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder, Topology
from strom.streams.config import StreamsConfig

from .conftest import produce_lines

S, L = Serdes.String(), Serdes.Long()


def counts(source: str, sink: str, fail_on: str | None = None) -> Topology:
    def check(key, value):
        if value == fail_on:
            raise ValueError(f"bad record {value}")
        return value

    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_(S, S)).map_values(check).group_by_key()
        .count(materialized=Materialized.as_("counts")).to_stream().to(sink, Produced.with_(S, L)))
    return builder.build()


def _batch(bootstrap: str, topic: str, start: int, end: int) -> tuple[BatchPlan, Iterator[pa.RecordBatch]]:
    plan = BatchPlan.from_json(json.dumps({"subtopology": 0, "partition": 0, "owned": [topic],
                                           "ranges": [[topic, 0, start, end]]}))
    settings = ReadSettings(bootstrap, {}, True, True)
    return plan, read_range(OffsetRange(topic, 0, start, end), settings, kafka_schema(True))


def run_batch(topology: Topology, config: StreamsConfig, bootstrap: str, topic: str, start: int, end: int,
         run_id: str = "counts"):
    """One task batch; ``run_id`` stands for one SparkStreams.start() (open tasks are reused within it)."""
    plan, batches = _batch(bootstrap, topic, start, end)
    return TaskAttempt(topology, config, plan, run_id).run(batches)


def counting_app(bootstrap: str, names: dict[str, str], state_dir: str, prefix: str,
                 lines: list[tuple[str, str]]) -> tuple[Topology, StreamsConfig]:
    """Counts per key from ``names["source"]`` to ``names["sink"]``, exactly-once; internal topics
    created and ``lines`` written to the source."""
    config = StreamsConfig({"application.id": f"{prefix}-{names['source']}", "bootstrap.servers": bootstrap,
                            "processing.guarantee": "exactly_once_v2", "state.dir": state_dir})
    topology = counts(names["source"], names["sink"])
    create_internal_topics(plan_application(topology, config, clients.admin(bootstrap)),
                           clients.admin(bootstrap), bootstrap)
    produce_lines(bootstrap, names["source"], lines)
    return topology, config
