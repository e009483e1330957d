"""The Processor API: Record, Processor, ProcessorContext, punctuation, Topology."""

from strom.streams.processor.api import (
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)
from strom.streams.processor.internals.handlers import (
    DefaultProductionExceptionHandler,
    FailOnInvalidTimestamp,
    HandlerResponse,
    LogAndContinueExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    LogAndFailExceptionHandler,
    LogAndSkipOnInvalidTimestamp,
    UsePartitionTimeOnInvalidTimestamp,
    WallclockTimestampExtractor,
)
from strom.streams.processor.internals.records import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.topology import Topology, TopologyDescription

__all__ = [
    "Cancellable",
    "ConsumerRecord",
    "DefaultProductionExceptionHandler",
    "FailOnInvalidTimestamp",
    "HandlerResponse",
    "LogAndContinueExceptionHandler",
    "LogAndContinueProductionExceptionHandler",
    "LogAndFailExceptionHandler",
    "LogAndSkipOnInvalidTimestamp",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "RecordMetadata",
    "TaskId",
    "TopicPartition",
    "Topology",
    "TopologyDescription",
    "UsePartitionTimeOnInvalidTimestamp",
    "WallclockTimestampExtractor",
]
