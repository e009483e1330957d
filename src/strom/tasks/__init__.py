"""strom.tasks: Decaton-style concurrent, key-ordered processing within a partition.

Build a subscription with :class:`SubscriptionBuilder` and :class:`ProcessorsBuilder`; the key-ordered
concurrency core (:class:`KeyOrderedExecutor`) is reusable without Kafka.
"""

from strom.concurrency import AsyncRuntime, KeyOrderedExecutor, SubPartitioner
from strom.kafka.headers import Header, Headers
from strom.tasks.batching import BatchingProcessor, BatchingTask
from strom.tasks.client import DecatonClient, DecatonClientBuilder, PutTaskResult
from strom.tasks.commit_control import OffsetState, OutOfOrderCommitControl
from strom.tasks.compaction import CompactChoice, CompactingTask, CompactionProcessor
from strom.tasks.completion import Completion, TimeoutChoice
from strom.tasks.context import ConsumedRecord, DecatonTask, ProcessingContext, TaskMetadata
from strom.tasks.metrics import PartitionMetricsSnapshot
from strom.tasks.processors import ProcessorsBuilder, ProcessorScope, TaskExtractor
from strom.tasks.properties import (
    ProcessorProperties,
    Property,
    PropertyDefinition,
    PropertySupplier,
    StaticPropertySupplier,
)
from strom.tasks.property_suppliers import FilePropertySupplier, KafkaTopicPropertySupplier
from strom.tasks.quota import PerKeyQuotaConfig, QuotaMetrics
from strom.tasks.rate_limiter import RateLimiter
from strom.tasks.retry import RetryConfig
from strom.tasks.subscription import ProcessorSubscription, SubscriptionBuilder, SubscriptionState

__all__ = [
    "AsyncRuntime",
    "BatchingProcessor",
    "BatchingTask",
    "CompactChoice",
    "CompactingTask",
    "CompactionProcessor",
    "Completion",
    "ConsumedRecord",
    "DecatonClient",
    "DecatonClientBuilder",
    "DecatonTask",
    "FilePropertySupplier",
    "Header",
    "Headers",
    "KafkaTopicPropertySupplier",
    "KeyOrderedExecutor",
    "OffsetState",
    "OutOfOrderCommitControl",
    "PartitionMetricsSnapshot",
    "PerKeyQuotaConfig",
    "ProcessingContext",
    "ProcessorProperties",
    "ProcessorScope",
    "ProcessorSubscription",
    "ProcessorsBuilder",
    "Property",
    "PropertyDefinition",
    "PropertySupplier",
    "PutTaskResult",
    "QuotaMetrics",
    "RateLimiter",
    "RetryConfig",
    "StaticPropertySupplier",
    "SubPartitioner",
    "SubscriptionBuilder",
    "SubscriptionState",
    "TaskExtractor",
    "TaskMetadata",
    "TimeoutChoice",
]
