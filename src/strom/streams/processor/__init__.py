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
from strom.streams.processor.internals.handlers import (
    DefaultProductionExceptionHandler,
    ErrorHandlerContext,
    FailOnInvalidTimestamp,
    HandlerResponse,
    LogAndContinueExceptionHandler,
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    LogAndFailExceptionHandler,
    LogAndFailProcessingExceptionHandler,
    LogAndSkipOnInvalidTimestamp,
    UsePartitionTimeOnInvalidTimestamp,
    WallclockTimestampExtractor,
)
from strom.streams.processor.internals.records import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.partitioner import StreamPartitioner
from strom.streams.processor.topology import Topology, TopologyDescription

__all__ = [
    "AutoOffsetReset",
    "Cancellable",
    "ConsumerRecord",
    "DefaultProductionExceptionHandler",
    "ErrorHandlerContext",
    "FailOnInvalidTimestamp",
    "FixedKeyProcessor",
    "FixedKeyProcessorContext",
    "FixedKeyProcessorSupplier",
    "FixedKeyRecord",
    "HandlerResponse",
    "LogAndContinueExceptionHandler",
    "LogAndContinueProcessingExceptionHandler",
    "LogAndContinueProductionExceptionHandler",
    "LogAndFailExceptionHandler",
    "LogAndFailProcessingExceptionHandler",
    "LogAndSkipOnInvalidTimestamp",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "RecordMetadata",
    "StreamPartitioner",
    "TaskId",
    "TopicPartition",
    "Topology",
    "TopologyDescription",
    "UsePartitionTimeOnInvalidTimestamp",
    "WallclockTimestampExtractor",
]
