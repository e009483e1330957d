"""strom.tasks: Decaton-style concurrent, key-ordered processing within a partition.

Build a subscription with :class:`SubscriptionBuilder` and :class:`ProcessorsBuilder`; the key-ordered
concurrency core (:class:`KeyOrderedExecutor`) is reusable without Kafka.
"""

from strom.concurrency import AsyncRuntime, KeyOrderedExecutor, SubPartitioner
from strom.tasks.client import DecatonClient, DecatonClientBuilder, PutTaskResult
from strom.tasks.commit_control import OffsetState, OutOfOrderCommitControl
from strom.tasks.compaction import CompactChoice, CompactingTask, CompactionProcessor
from strom.tasks.completion import Completion, TimeoutChoice
from strom.tasks.context import ProcessingContext, TaskMetadata
from strom.tasks.metrics import PartitionMetricsSnapshot
from strom.tasks.processors import ProcessorsBuilder, ProcessorScope
from strom.tasks.properties import (
    ProcessorProperties,
    Property,
    PropertyDefinition,
    PropertySupplier,
    StaticPropertySupplier,
)
from strom.tasks.property_suppliers import FilePropertySupplier, KafkaTopicPropertySupplier
from strom.tasks.rate_limiter import RateLimiter
from strom.tasks.subscription import ProcessorSubscription, SubscriptionBuilder, SubscriptionState

__all__ = [
    "AsyncRuntime",
    "CompactChoice",
    "CompactingTask",
    "CompactionProcessor",
    "Completion",
    "DecatonClient",
    "DecatonClientBuilder",
    "FilePropertySupplier",
    "KafkaTopicPropertySupplier",
    "KeyOrderedExecutor",
    "OffsetState",
    "OutOfOrderCommitControl",
    "PartitionMetricsSnapshot",
    "ProcessingContext",
    "ProcessorProperties",
    "ProcessorScope",
    "ProcessorSubscription",
    "ProcessorsBuilder",
    "Property",
    "PropertyDefinition",
    "PropertySupplier",
    "PutTaskResult",
    "RateLimiter",
    "StaticPropertySupplier",
    "SubPartitioner",
    "SubscriptionBuilder",
    "SubscriptionState",
    "TaskMetadata",
    "TimeoutChoice",
]
