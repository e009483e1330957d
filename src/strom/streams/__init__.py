"""strom.streams: the Kafka Streams programming model and runtime.

Build a topology with ``StreamsBuilder`` (DSL) or ``Topology`` (Processor API); test it with
``TopologyTestDriver``; run it with the Spark runtime (``strom.spark``). What applications use is
exported here and from the public modules; runtimes reach the engine's internals (``StreamTask``) under
``internals/`` packages.
"""

from strom.kafka.serdes import Serdes
from strom.streams.config import StreamsConfig
from strom.streams.kstream import (
    Branched,
    BranchedKStream,
    Change,
    Consumed,
    Grouped,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
    Materialized,
    Named,
    Printed,
    Produced,
    Repartitioned,
    StoreType,
    StreamsBuilder,
    ValueTransformerWithKey,
)
from strom.streams.kstream.emit_strategy import EmitStrategy
from strom.streams.kstream.global_table import GlobalKTable
from strom.streams.kstream.join_options import Joined, StreamJoined, TableJoined
from strom.streams.kstream.suppressed import BufferConfig, Suppressed
from strom.streams.kstream.windowed_serdes import WindowedSerdes
from strom.streams.kstream.windows import (
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    UnlimitedWindows,
    Window,
    Windowed,
)
from strom.streams.processor import (
    AutoOffsetReset,
    FixedKeyProcessor,
    FixedKeyProcessorContext,
    FixedKeyRecord,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    StreamPartitioner,
    Topology,
    TopologyDescription,
)
from strom.streams.query import (
    FailureReason,
    KeyQuery,
    MultiVersionedKeyQuery,
    Position,
    PositionBound,
    QueryableStoreTypes,
    RangeQuery,
    StateQueryRequest,
    StoreQueryParameters,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from strom.streams.state.stores import Stores
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.versioned import VersionedRecord
from strom.streams.test_driver import TestInputTopic, TestOutputTopic, TestRecord, TopologyTestDriver

__all__ = [
    "AutoOffsetReset",
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Change",
    "Consumed",
    "EmitStrategy",
    "FailureReason",
    "FixedKeyProcessor",
    "FixedKeyProcessorContext",
    "FixedKeyRecord",
    "GlobalKTable",
    "Grouped",
    "JoinWindows",
    "Joined",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "KeyQuery",
    "Materialized",
    "MultiVersionedKeyQuery",
    "Named",
    "Position",
    "PositionBound",
    "Printed",
    "Processor",
    "ProcessorContext",
    "Produced",
    "PunctuationType",
    "QueryableStoreTypes",
    "RangeQuery",
    "Record",
    "Repartitioned",
    "Serdes",
    "SessionWindows",
    "SlidingWindows",
    "StateQueryRequest",
    "StoreQueryParameters",
    "StoreType",
    "Stores",
    "StreamJoined",
    "StreamPartitioner",
    "StreamsBuilder",
    "StreamsConfig",
    "Suppressed",
    "TableJoined",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "TimeWindows",
    "TimestampedKeyQuery",
    "TimestampedRangeQuery",
    "Topology",
    "TopologyDescription",
    "TopologyTestDriver",
    "UnlimitedWindows",
    "ValueAndTimestamp",
    "ValueTransformerWithKey",
    "VersionedKeyQuery",
    "VersionedRecord",
    "Window",
    "WindowKeyQuery",
    "WindowRangeQuery",
    "Windowed",
    "WindowedSerdes",
]
