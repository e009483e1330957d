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
    "LogAndSkipOnInvalidTimestamp",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "RecordMetadata",
    "TaskId",
    "TimestampExtractor",
    "TopicPartition",
    "Topology",
    "TopologyDescription",
    "UsePartitionTimeOnInvalidTimestamp",
    "WallclockTimestampExtractor",
]
