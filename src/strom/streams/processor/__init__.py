"""The Processor API: Record, Processor, ProcessorContext, punctuation, Topology."""

from strom.streams.processor.api import (
    AutoOffsetReset,
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)
from strom.streams.processor.fixed_key import (
    FixedKeyProcessor,
    FixedKeyProcessorContext,
    FixedKeyProcessorSupplier,
    FixedKeyRecord,
)
from strom.streams.processor.partitioner import StreamPartitioner
from strom.streams.processor.records import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.timestamps import (
    FailOnInvalidTimestamp,
    LogAndSkipOnInvalidTimestamp,
    TimestampExtractor,
    UsePartitionTimeOnInvalidTimestamp,
    WallclockTimestampExtractor,
)
from strom.streams.processor.topology import Topology, TopologyDescription

__all__ = [
    "AutoOffsetReset",
    "Cancellable",
    "ConsumerRecord",
    "FailOnInvalidTimestamp",
    "FixedKeyProcessor",
    "FixedKeyProcessorContext",
    "FixedKeyProcessorSupplier",
    "FixedKeyRecord",
    "LogAndSkipOnInvalidTimestamp",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "RecordMetadata",
    "StreamPartitioner",
    "TaskId",
    "TimestampExtractor",
    "TopicPartition",
    "Topology",
    "TopologyDescription",
    "UsePartitionTimeOnInvalidTimestamp",
    "WallclockTimestampExtractor",
]
