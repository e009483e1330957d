"""The "strom" data source: Spark's Kafka connector, as a Python data source over confluent-kafka.

Streaming offsets are JSON like Spark's Kafka source (``{"topic": {"0": 42}}``), so checkpoints
read naturally. One input partition per topic partition; records reach Spark as Arrow batches.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from strom.errors import ConfigError, DataLossError
from strom.spark.connector.metadata import DriverMetadata, TopicMetadata
from strom.spark.connector.options import SourceOptions, TopicPartitionOffsets, sink_options, source_options
from strom.spark.connector.reader import OffsetRange, ReadSettings, read_range

__all__ = [
    "HEADERS_FIELD", "KAFKA_FIELDS", "KafkaBatchReader", "KafkaStreamReader", "StromDataSource",
    "kafka_schema", "offsets_from_json", "offsets_to_json", "rate_limit", "split_ranges",
]

log = logging.getLogger(__name__)

KAFKA_FIELDS = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
)
HEADERS_FIELD = StructField("headers", ArrayType(StructType([
    StructField("key", StringType()), StructField("value", BinaryType())])))


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema, with ``headers`` when includeHeaders=true."""
    return StructType([*KAFKA_FIELDS, HEADERS_FIELD] if include_headers else list(KAFKA_FIELDS))

def offsets_to_json(offsets: TopicPartitionOffsets) -> dict:
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def offsets_from_json(offsets: dict) -> TopicPartitionOffsets:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


class StromDataSource(DataSource):
    """``spark.read[Stream].format("strom")`` and ``df.write[Stream].format("strom")``."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def schema(self) -> StructType:
        return kafka_schema(str(self.options.get("includeheaders", "false")).strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from strom.spark.connector.sink import KafkaBatchWriter

        if overwrite:
            raise ConfigError("Kafka topics cannot be overwritten, only appended to: use "
                              "df.write.format('strom').mode('append').")
        return KafkaBatchWriter(sink_options(self.options, streaming=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from strom.spark.connector.sink import KafkaStreamWriter

        return KafkaStreamWriter(sink_options(self.options, streaming=True), schema)


def _read_settings(options: SourceOptions) -> ReadSettings:
    return ReadSettings(options.bootstrap_servers, options.client_config,
                        options.fail_on_data_loss, options.include_headers)


def _ranges(start: TopicPartitionOffsets, end: TopicPartitionOffsets, min_partitions: int | None
            ) -> list[OffsetRange]:
    ranges = [OffsetRange(t, p, start[(t, p)], offset) for (t, p), offset in sorted(end.items())
              if offset > start[(t, p)]]
    return ranges if min_partitions is None else split_ranges(ranges, min_partitions)


def split_ranges(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """minPartitions, as Spark's Kafka source: fewer ranges than that are cut into pieces, each
    range into a share of ``min_partitions`` in proportion to its size, so all cores read."""
    if len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    pieces = []
    for r in ranges:
        size = r.end - r.start
        parts = min(size, max(1, round(size / total * min_partitions)))
        bounds = [r.start + size * i // parts for i in range(parts + 1)]
        pieces += [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds)]
    return pieces


class KafkaBatchReader(DataSourceReader):
    """``spark.read``: startingOffsets (default earliest) to endingOffsets (default latest)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        metadata = TopicMetadata(self._options)
        partitions = metadata.topic_partitions()
        start = metadata.resolve("startingOffsets", self._options.starting, partitions)
        end = metadata.resolve("endingOffsets", self._options.ending, partitions)
        backwards = sorted(tp for tp in partitions if start[tp] > end[tp])
        if backwards:
            raise ConfigError(
                "Option 'startingOffsets' is past 'endingOffsets' for "
                + ", ".join(f"{t}-{p} ({start[(t, p)]} > {end[(t, p)]})" for t, p in backwards)
                + ". Lower startingOffsets or raise endingOffsets."
            )
        start = _check_start(start, metadata.earliest(partitions), self._options.fail_on_data_loss)
        return _ranges(start, end, self._options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(partition, _read_settings(self._options), self._schema)


class KafkaStreamReader(DriverMetadata, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: micro-batches between offset dicts kept in Spark's checkpoint."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._options = options
        self._schema = schema
        self._latest: TopicPartitionOffsets | None = None
        self._available_now_target: TopicPartitionOffsets | None = None

    def initialOffset(self) -> dict:
        partitions = self._metadata.topic_partitions()
        return offsets_to_json(self._metadata.resolve("startingOffsets", self._options.starting, partitions))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self._metadata.topic_partitions()
        self._available_now_target = self._metadata.latest(partitions)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        partitions = self._metadata.topic_partitions()
        latest = self._metadata.latest(partitions)
        self._latest = latest
        begin = self._carry_over(offsets_from_json(start), latest)
        target = self._available_now_target
        end = latest if target is None else {
            tp: min(latest[tp], target[tp]) if tp in target else begin[tp] for tp in begin}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return offsets_to_json({tp: max(end.get(tp, o), o) for tp, o in begin.items()})

    def _carry_over(self, begin: TopicPartitionOffsets, latest: TopicPartitionOffsets
                    ) -> TopicPartitionOffsets:
        """Starts new partitions at earliest; drops vanished ones and checks for rewound logs."""
        fail = self._options.fail_on_data_loss
        vanished = sorted(set(begin) - set(latest))
        if vanished:
            _data_loss(fail, f"partitions {vanished} no longer exist (topic deleted?)")
        rewound = sorted(tp for tp in set(begin) & set(latest) if latest[tp] < begin[tp])
        if rewound:
            _data_loss(fail, f"the log of {rewound} is shorter than offsets already read "
                             "(topic recreated?)")
        new = [tp for tp in latest if tp not in begin]
        carried = {tp: o for tp, o in begin.items() if tp in latest and tp not in rewound}
        carried.update({tp: 0 for tp in rewound})
        carried.update(self._metadata.earliest(new))
        return carried

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        stop = offsets_from_json(end)
        begin = offsets_from_json(start)
        missing = [tp for tp in stop if tp not in begin]
        begin.update(self._metadata.earliest(missing))
        begin = _check_start({tp: begin[tp] for tp in stop}, self._metadata.earliest(list(stop)),
                             self._options.fail_on_data_loss)
        return _ranges(begin, stop, self._options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(partition, _read_settings(self._options), self._schema)


def rate_limit(start: TopicPartitionOffsets, latest: TopicPartitionOffsets, max_rows: int
               ) -> TopicPartitionOffsets:
    """Spreads ``max_rows`` over partitions in proportion to their backlog (maxOffsetsPerTrigger)."""
    backlog = {tp: max(0, latest.get(tp, o) - o) for tp, o in start.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return {tp: start[tp] + n for tp, n in backlog.items()}
    shares = {tp: n * max_rows // total for tp, n in backlog.items()}
    spare = max_rows - sum(shares.values())
    for tp in sorted(backlog, key=lambda tp: backlog[tp] - shares[tp], reverse=True)[:spare]:
        shares[tp] += 1
    return {tp: start[tp] + min(shares[tp], backlog[tp]) for tp in start}


def _check_start(start: TopicPartitionOffsets, earliest: TopicPartitionOffsets, fail: bool
                 ) -> TopicPartitionOffsets:
    gone = sorted(tp for tp, o in start.items() if o < earliest.get(tp, 0))
    if gone:
        _data_loss(fail, "records before the earliest available offsets were removed: "
                   + ", ".join(f"{t}-{p} wanted {start[(t, p)]}, earliest {earliest[(t, p)]}"
                               for t, p in gone))
    return {tp: max(o, earliest.get(tp, 0)) for tp, o in start.items()}


def _data_loss(fail: bool, what: str) -> None:
    if fail:
        raise DataLossError(f"Data loss: {what}. The query cannot read them (option failOnDataLoss=true). "
                            "Set failOnDataLoss=false to skip lost records and go on.")
    log.warning("Skipping lost records (failOnDataLoss=false): %s", what)

