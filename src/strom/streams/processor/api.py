"""The public Processor API: records, processors, their context and punctuation (Kafka Streams' names)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NamedTuple, Protocol, runtime_checkable

from strom.streams.internals.tuples import new_tuple

__all__ = [
    "AutoOffsetReset",
    "Cancellable",
    "Headers",
    "Processor",
    "ProcessorContext",
    "ProcessorSupplier",
    "PunctuationType",
    "Punctuator",
    "Record",
    "RecordMetadata",
]

Headers = tuple[tuple[str, bytes | None], ...]


class Record(NamedTuple):
    """One record flowing through a topology; immutable, ``with_*`` return copies.

    A NamedTuple: a record is made per processor hop, and the engine builds them with the C-level
    ``new_tuple(Record, (key, value, timestamp, headers))``.
    """

    key: Any
    value: Any
    timestamp: int
    headers: Headers = ()

    def with_key(self, key: Any) -> Record:
        return new_tuple(Record, (key, self.value, self.timestamp, self.headers))

    def with_value(self, value: Any) -> Record:
        return new_tuple(Record, (self.key, value, self.timestamp, self.headers))

    def with_timestamp(self, timestamp: int) -> Record:
        return new_tuple(Record, (self.key, self.value, timestamp, self.headers))

    def with_headers(self, headers: Headers) -> Record:
        return new_tuple(Record, (self.key, self.value, self.timestamp, tuple(headers)))


class RecordMetadata:
    """Where the record being processed came from (topic, partition, offset); absent in punctuations."""

    __slots__ = ("offset", "partition", "topic")

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset

    def __repr__(self) -> str:
        return f"RecordMetadata({self.topic}-{self.partition}@{self.offset})"


class AutoOffsetReset(enum.Enum):
    """Where a source starts when the application has no committed offset for a partition (Kafka's
    ``AutoOffsetReset``): the first record kept, or the records produced from the start on."""

    EARLIEST = "earliest"
    LATEST = "latest"


class PunctuationType(enum.Enum):
    """STREAM_TIME advances with record timestamps; WALL_CLOCK_TIME with the system (or driver) clock."""

    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


Punctuator = Callable[[int], None]


@runtime_checkable
class Cancellable(Protocol):
    def cancel(self) -> None: ...


class ProcessorContext(Protocol):
    """What a processor may do: forward downstream, reach its stores, schedule punctuations, ask to commit."""

    @property
    def application_id(self) -> str: ...

    @property
    def task_id(self) -> str: ...

    def forward(self, record: Record, child_name: str | None = None) -> None: ...

    def get_state_store(self, name: str) -> Any: ...

    def schedule(
        self, interval: int | timedelta, punctuation_type: PunctuationType, punctuator: Punctuator
    ) -> Cancellable: ...

    def commit(self) -> None: ...

    def record_metadata(self) -> RecordMetadata | None: ...

    def current_stream_time_ms(self) -> int: ...

    def current_system_time_ms(self) -> int: ...

    def app_configs(self) -> dict[str, Any]: ...

    def app_configs_with_prefix(self, prefix: str) -> dict[str, Any]: ...

    def key_serde(self) -> Any: ...

    def value_serde(self) -> Any: ...


class Processor:
    """Base class of every processor. ``flush()`` (optional) runs at commit before caches are flushed,
    so a processor holding work in flight can finish it before the task's state is committed."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release resources; called once when the task closes."""


ProcessorSupplier = Callable[[], Processor]
