"""strom.streams: the Kafka Streams programming model and runtime.

Build a topology with ``StreamsBuilder`` (DSL) or ``Topology`` (Processor API); test it with
``TopologyTestDriver``; run it with the Spark runtime (``strom.spark``), which drives ``StreamTask``.
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
    Produced,
    Repartitioned,
    StreamsBuilder,
)
from strom.streams.processor import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    Topology,
    TopologyDescription,
)
from strom.streams.processor.internals.task import StreamTask
from strom.streams.state.stores import Stores
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.test_driver import TestInputTopic, TestOutputTopic, TestRecord, TopologyTestDriver

__all__ = [
    "Branched",
    "BranchedKStream",
    "Change",
    "Consumed",
    "Grouped",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "Processor",
    "ProcessorContext",
    "Produced",
    "PunctuationType",
    "Record",
    "Repartitioned",
    "Serdes",
    "Stores",
    "StreamTask",
    "StreamsBuilder",
    "StreamsConfig",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "Topology",
    "TopologyDescription",
    "TopologyTestDriver",
    "ValueAndTimestamp",
]
