"""One stream task over one micro-batch (the executor side), against the broker, without Spark.

A replayed batch is recognised by the committed offsets and skipped; a batch whose processing
fails aborts its transaction (nothing visible read_committed, the store untouched) and the next
attempt processes it once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
import pytest

from strom.errors import ProcessingError
from strom.kafka import clients
from strom.spark.reader import OffsetRange, ReadSettings, read_range
from strom.spark.runtime.executor import BatchPlan, TaskAttempt
from strom.spark.runtime.plan import create_internal_topics, plan_application
from strom.spark.source import kafka_schema
from strom.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder, Topology
from strom.streams.config import StreamsConfig

from .conftest import produce_lines
from .wordcount import read_updates

pytestmark = [pytest.mark.broker]
S, L = Serdes.String(), Serdes.Long()


def _counts(source: str, sink: str, fail_on: str | None = None) -> Topology:
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


def _run(topology: Topology, config: StreamsConfig, bootstrap: str, topic: str, start: int, end: int,
         run_id: str = "counts"):
    """One task batch; ``run_id`` stands for one SparkStreams.start() (open tasks are reused within it)."""
    plan, batches = _batch(bootstrap, topic, start, end)
    return TaskAttempt(topology, config, plan, run_id).run(batches)


def test_replayed_batch_is_skipped_and_failed_batch_leaves_nothing(broker, topics, tmp_path):
    bootstrap = broker.bootstrap_servers
    names = topics(source=1, sink=1)
    config = StreamsConfig({"application.id": f"rt-attempt-{names['source']}", "bootstrap.servers": bootstrap,
                            "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path)})
    topology = _counts(names["source"], names["sink"])
    create_internal_topics(plan_application(topology, config, clients.admin(bootstrap)),
                           clients.admin(bootstrap), bootstrap)
    produce_lines(bootstrap, names["source"], [("a", "x"), ("b", "x"), ("a", "x"), ("a", "boom"), ("b", "x")])

    first = _run(topology, config, bootstrap, names["source"], 0, 3)
    assert (first.records, first.skipped) == (3, False)
    replay = _run(topology, config, bootstrap, names["source"], 0, 3)
    assert replay.skipped and replay.records == 0

    failing = _counts(names["source"], names["sink"], fail_on="boom")
    with pytest.raises(ProcessingError, match="bad record boom"):
        _run(failing, config, bootstrap, names["source"], 3, 5, run_id="failing")
    assert read_updates(bootstrap, names["sink"]) == {"a": [2], "b": [1]}  # aborted: nothing new

    retry = _run(topology, config, bootstrap, names["source"], 3, 5)
    assert (retry.records, retry.restored, retry.skipped) == (2, 0, False)  # store was untouched
    assert read_updates(bootstrap, names["sink"]) == {"a": [2, 3], "b": [1, 2]}
