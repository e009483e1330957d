"""Kafka Streams' fixed-key processors (KIP-820), for ``KStream.process_values``: the processor may change
a record's value, timestamp and headers, never its key, so no repartition is needed after it.

A ``FixedKeyRecord`` is only made by the runtime (from the record being processed) and has no
``with_key``; its context forwards only FixedKeyRecords. Forwarding anything else raises a TopologyError
saying to use ``KStream.process`` for key changes.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any

from strom.errors import TopologyError
from strom.streams.internals.tuples import new_tuple
from strom.streams.processor.api import (
    HeldHeaders,
    ProcessorContext,
    Record,
    RecordHeaders,
    held_headers,
    holding,
)

__all__ = [
    "FixedKeyProcessor",
    "FixedKeyProcessorContext",
    "FixedKeyProcessorSupplier",
    "FixedKeyRecord",
]

_Fields = namedtuple("_Fields", ("key", "value", "timestamp", "headers"))


class FixedKeyRecord(RecordHeaders, _Fields):
    """Kafka's FixedKeyRecord: ``key``, ``value``, ``timestamp``, ``headers`` (Kafka's mutable Headers, as
    Record's); ``with_value``, ``with_timestamp`` and ``with_headers`` return copies with the same key."""

    def __new__(cls, *args: Any, **kwargs: Any) -> FixedKeyRecord:
        raise TopologyError("A FixedKeyRecord cannot be made with a key of your choice: derive it from the "
                            "record process() received (record.with_value(...)). To change keys, use "
                            "KStream.process with a Processor.")

    raw_headers = _Fields.headers

    def with_value(self, value: Any) -> FixedKeyRecord:
        return new_tuple(FixedKeyRecord, (self[0], value, self[2], self._copied_headers()))

    def with_timestamp(self, timestamp: int) -> FixedKeyRecord:
        return new_tuple(FixedKeyRecord, (self[0], self[1], timestamp, self._copied_headers()))

    def with_headers(self, headers: HeldHeaders | None) -> FixedKeyRecord:
        """A copy with ``headers`` (copied: pass ``record.headers`` to give the copy its own)."""
        return new_tuple(FixedKeyRecord, (self[0], self[1], self[2], holding(headers)))

    def _replace(self, **changes: Any) -> FixedKeyRecord:
        if "key" in changes:
            raise TopologyError("A FixedKeyRecord's key cannot change; use KStream.process to re-key.")
        return new_tuple(FixedKeyRecord, (self[0], changes.get("value", self[1]),
                                          changes.get("timestamp", self[2]),
                                          holding(changes["headers"]) if "headers" in changes
                                          else self._copied_headers()))


class FixedKeyProcessorContext:
    """Kafka's FixedKeyProcessorContext: the processor context, whose ``forward`` takes FixedKeyRecords."""

    def __init__(self, context: ProcessorContext) -> None:
        self._context = context

    def forward(self, record: FixedKeyRecord, child_name: str | None = None) -> None:
        if type(record) is not FixedKeyRecord:
            raise TopologyError(f"A fixed-key processor (process_values) forwards FixedKeyRecords, got "
                                f"{type(record).__name__}: forward record.with_value(...) of the record "
                                "process() received; to change the key use KStream.process.")
        self._context.forward(new_tuple(Record, (record[0], record[1], record[2], held_headers(record))),
                              child_name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class FixedKeyProcessor:
    """Base class of the processors ``KStream.process_values`` runs (Kafka's FixedKeyProcessor)."""

    def init(self, context: FixedKeyProcessorContext) -> None:
        self.context = context

    def process(self, record: FixedKeyRecord) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release resources; called once when the task closes."""


FixedKeyProcessorSupplier = Callable[[], FixedKeyProcessor]
_NOT_FIXED_KEY = ("process_values runs FixedKeyProcessors (they cannot change the key, so no repartition "
                  "follows), got {}: subclass strom.streams.FixedKeyProcessor, or use KStream.process for a "
                  "Processor that may re-key.")


class FixedKeyProcessorAdapter:
    """Runs a fixed-key processor as a node's processor: FixedKeyRecords in, checked forwards out."""

    def __init__(self, processor: Any) -> None:
        if not isinstance(processor, FixedKeyProcessor):
            raise TopologyError(_NOT_FIXED_KEY.format(type(processor).__name__))
        self.processor = processor
        flush = getattr(processor, "flush", None)
        if callable(flush):
            self.flush = flush  # the task calls it at commit, as for any processor with flush()

    def init(self, context: ProcessorContext) -> None:
        self.processor.init(FixedKeyProcessorContext(context))

    def process(self, record: Record) -> None:
        self.processor.process(new_tuple(FixedKeyRecord, record))

    def close(self) -> None:
        self.processor.close()


def fixed_key_supplier(supplier: FixedKeyProcessorSupplier) -> Callable[[], FixedKeyProcessorAdapter]:
    """The node's processor supplier for ``process_values(supplier)``; a Processor class is refused now."""
    if isinstance(supplier, type) and not issubclass(supplier, FixedKeyProcessor):
        raise TopologyError(_NOT_FIXED_KEY.format(supplier.__name__))
    if not callable(supplier) or isinstance(supplier, FixedKeyProcessor):
        raise TopologyError(f"process_values needs a supplier that makes a new FixedKeyProcessor (its class, "
                            f"or a function returning one), got {supplier!r}.")
    return lambda: FixedKeyProcessorAdapter(supplier())
