"""The streaming source of an application: one Spark input partition per stream task.

Each micro-batch covers ``[start, end)`` of every source partition of every sub-topology. The
input partition of task ``<sub>_<p>`` holds the ranges of partition ``p`` of each source topic
of sub-topology ``sub``, so one Spark task executes one stream task. ``read`` first yields a
*plan row* (``topic`` null, ``offset`` -1, ``value`` the JSON of the task and its ranges), then
the records of each range as Arrow batches (the connector's reader). The executor needs the
plan row to know where the batch ends even when a range holds no visible record (transaction
markers, aborted records).

The first batch starts at the committed offsets of group ``<application.id>`` (Kafka's
committed offsets are the source of truth), else at the earliest offsets. Nothing is committed
here: the stream tasks commit their own offsets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from confluent_kafka import TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from strom.errors import BrokerUnavailableError, ConfigError
from strom.kafka import clients
from strom.kafka.reading import committed_offsets
from strom.spark.connector.metadata import DriverMetadata
from strom.spark.connector.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SourceOptions,
    Subscription,
    TopicPartitionOffsets,
)
from strom.spark.connector.reader import OffsetRange, ReadSettings, read_range
from strom.spark.connector.source import kafka_schema, offsets_from_json, offsets_to_json, rate_limit

__all__ = [
    "FORMAT",
    "PLAN_OPTION",
    "CommittedOffsets",
    "SourcePlan",
    "StreamTaskReader",
    "StreamTaskSource",
    "TaskInput",
    "plan_row",
]

FORMAT = "strom-stream-tasks"
PLAN_OPTION = "plan"
_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SourcePlan:
    """What the source of one sub-topology needs, passed as the JSON option ``plan``."""

    bootstrap_servers: str
    application_id: str
    subtopologies: dict[str, dict[str, int]]  # sub-topology id -> {source topic: partitions}
    max_records: int | None
    client_config: dict[str, str]
    stop_file: str

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> SourcePlan:
        return cls(**json.loads(text))

    @property
    def topics(self) -> dict[str, int]:
        return {t: n for topics in self.subtopologies.values() for t, n in topics.items()}

    def subtopology_of(self, topic: str) -> int:
        return next(int(s) for s, topics in self.subtopologies.items() if topic in topics)

    def owned(self, subtopology: int, partition: int) -> tuple[str, ...]:
        """The source topics of a sub-topology that have ``partition``: what its task reads."""
        return tuple(t for t, n in self.subtopologies[str(subtopology)].items() if partition < n)

    def source_options(self) -> SourceOptions:
        return SourceOptions(self.bootstrap_servers, Subscription(topics=tuple(self.topics)),
                             OffsetSpec(EARLIEST), OffsetSpec(LATEST), self.max_records, True, True,
                             {**self.client_config, "isolation.level": "read_committed",
                              "fetch.wait.max.ms": "10"})


@dataclass(frozen=True)
class TaskInput(InputPartition):
    """The input of stream task ``<subtopology>_<partition>`` for one micro-batch."""

    subtopology: int
    partition: int
    owned: tuple[str, ...]
    ranges: tuple[OffsetRange, ...]

    def plan_json(self) -> bytes:
        return json.dumps({"subtopology": self.subtopology, "partition": self.partition,
                           "owned": list(self.owned),
                           "ranges": [[r.topic, r.partition, r.start, r.end] for r in self.ranges]}).encode()


class StreamTaskSource(DataSource):
    """``spark.readStream.format("strom-stream-tasks").option("plan", SourcePlan.to_json())``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return kafka_schema(include_headers=True)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        raw = self.options.get(PLAN_OPTION)
        if raw is None:
            raise ConfigError(f"The {FORMAT} source is started by strom.spark.runtime.SparkStreams; "
                              "it needs the option 'plan'.")
        return StreamTaskReader(SourcePlan.from_json(raw), schema)


class StreamTaskReader(DriverMetadata, DataSourceStreamReader):
    def __init__(self, plan: SourcePlan, schema: StructType) -> None:
        self._plan = plan
        self._schema = schema
        self._options = plan.source_options()

    def _partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t, count in self._plan.topics.items() for p in range(count)]

    def initialOffset(self) -> dict:
        partitions = self._partitions()
        start = self._metadata.earliest(partitions)
        committed = CommittedOffsets(self._plan)
        try:
            start.update(committed.read(partitions))
        finally:
            committed.close()
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._plan.max_records
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if Path(self._plan.stop_file).exists():
            return start  # the application is stopping: plan no more batches
        begin = offsets_from_json(start)
        latest = self._metadata.latest(self._partitions())
        end = {tp: max(latest.get(tp, o), o) for tp, o in begin.items()}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return offsets_to_json(end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        tasks: dict[tuple[int, int], list[OffsetRange]] = {}
        for (topic, partition), offset in sorted(stop.items()):
            if offset > begin[(topic, partition)]:
                task = (self._plan.subtopology_of(topic), partition)
                tasks.setdefault(task, []).append(
                    OffsetRange(topic, partition, begin[(topic, partition)], offset))
        return [TaskInput(sub, p, self._plan.owned(sub, p), tuple(ranges))
                for (sub, p), ranges in sorted(tasks.items())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TaskInput)
        yield plan_row(partition, self._schema)
        settings = ReadSettings(self._plan.bootstrap_servers, self._options.client_config, True, True)
        for offset_range in partition.ranges:
            yield from read_range(offset_range, settings, self._schema)

    def commit(self, end: dict) -> None:
        """Offsets are committed by the stream tasks, in their transactions."""


def plan_row(task: TaskInput, schema: StructType) -> pa.RecordBatch:
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    values = {"value": [task.plan_json()], "offset": [-1], "partition": [task.partition]}
    columns = [pa.array(values.get(field.name, [None]), field.type) for field in arrow_schema]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


class CommittedOffsets:
    """Reads the offsets group ``<application.id>`` committed, with one consumer kept open for
    repeated reads (``SparkStreams.lag`` polls them); ``close()`` when done."""

    def __init__(self, plan: SourcePlan) -> None:
        self._plan = plan
        self._consumer = clients.consumer(plan.bootstrap_servers, group_id=plan.application_id,
                                          **plan.client_config)

    def read(self, partitions: list[tuple[str, int]]) -> TopicPartitionOffsets:
        """Partitions without a commit are left out."""
        return committed_offsets(self._consumer, self._plan.application_id, partitions, _TIMEOUT_S)

    def commit(self, offsets: TopicPartitionOffsets) -> None:
        """Commits ``offsets`` for the group, outside any transaction: only while no task runs."""
        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                  asynchronous=False)
        except Exception as exc:
            raise BrokerUnavailableError(
                f"Could not commit start offsets for group {self._plan.application_id!r} at "
                f"{self._plan.bootstrap_servers}: {exc}. Check that the broker is running.") from exc

    def close(self) -> None:
        self._consumer.close()
