"""The public Processor API: records, processors, their context and punctuation (Kafka Streams' names)."""

from __future__ import annotations

import enum
from collections import namedtuple
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

from strom.kafka.headers import Headers
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

HeldHeaders = Sequence[tuple[str, bytes | None]]
"""What a record holds as headers: the ``(key, value)`` pairs it was read with (a tuple, not copied per
hop), or the ``Headers`` a processor made of them by looking at ``record.headers``."""


class RecordHeaders:
    """``headers`` of Record and FixedKeyRecord: Kafka's mutable ``Headers``, made on first access.

    A record is a tuple whose fourth item holds the headers as they travel (``raw_headers``); most
    records are never asked for their ``Headers``, so the engine passes that item along and never
    allocates one. The first ``record.headers`` makes a ``Headers`` of it and keeps it on the record,
    so changes made to it travel with the record when it is forwarded (``ProcessorContext.forward``
    puts it in the tuple). ``with_*`` copy a ``Headers`` (as Kafka's ``Record`` does), so the copy's
    headers can change without touching the original's.
    """

    __slots__ = ()

    @property
    def headers(self) -> Headers:
        held = tuple.__getitem__(self, 3)  # type: ignore[arg-type]
        if type(held) is Headers:
            return held
        made: Headers | None = self.__dict__.get("_headers")
        if made is None:
            made = self.__dict__["_headers"] = Headers(held)
        return made

    def _copied_headers(self) -> HeldHeaders:
        held = getattr(self, "_headers", None)  # held_headers(self), inlined: with_value is a DSL hot path
        if held is None:
            held = tuple.__getitem__(self, 3)  # type: ignore[arg-type]
        return Headers(held) if type(held) is Headers else held


def held_headers(record: tuple) -> HeldHeaders:
    """The headers a record carries on: its ``Headers`` if a processor looked at them, else what it holds."""
    made = getattr(record, "_headers", None)
    return tuple.__getitem__(record, 3) if made is None else made


def holding(headers: HeldHeaders | None) -> HeldHeaders:
    """What a record made with ``headers`` holds: a copy of a ``Headers`` (Kafka's Record copies them,
    so the caller's object can change without changing the record), an immutable tuple of anything else."""
    if headers is None:
        return ()
    if type(headers) is Headers:
        return Headers(headers)
    return headers if type(headers) is tuple else tuple(headers)


_RecordFields = namedtuple("_RecordFields", ("key", "value", "timestamp", "headers"), defaults=((),))


class Record(RecordHeaders, _RecordFields):
    """One record flowing through a topology: ``key``, ``value``, ``timestamp`` and Kafka's mutable
    ``headers``; ``with_*`` return copies.

    A tuple: a record is made per processor hop, and the engine builds them with the C-level
    ``new_tuple(Record, (key, value, timestamp, raw_headers))``. Not slotted: an instance keeps the
    ``Headers`` made on first access (see RecordHeaders).
    """

    raw_headers = _RecordFields.headers
    """The fourth item as it travels (for the engine and DSL operators: no ``Headers`` is made)."""

    def __new__(cls, key: Any, value: Any, timestamp: int, headers: HeldHeaders | None = ()) -> Record:
        if type(headers) is not tuple:
            headers = holding(headers)
        return new_tuple(cls, (key, value, timestamp, headers))

    def with_key(self, key: Any) -> Record:
        return new_tuple(Record, (key, self[1], self[2], self._copied_headers()))

    def with_value(self, value: Any) -> Record:
        return new_tuple(Record, (self[0], value, self[2], self._copied_headers()))

    def with_timestamp(self, timestamp: int) -> Record:
        return new_tuple(Record, (self[0], self[1], timestamp, self._copied_headers()))

    def with_headers(self, headers: HeldHeaders | None) -> Record:
        """A copy with ``headers`` (copied: pass ``record.headers`` to give the copy its own)."""
        return new_tuple(Record, (self[0], self[1], self[2], holding(headers)))


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

    def headers(self) -> Headers: ...

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
