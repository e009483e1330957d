"""Processors of the stateless KStream operators. Each forwards through its node context, depth-first."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from strom.errors import ProcessingError
from strom.streams.internals.tuples import new_tuple
from strom.streams.processor.api import Record
from strom.streams.processor.internals.fusion import FusedStep
from strom.streams.processor.internals.nodes import ContextFreeProcessor

KV = Callable[[Any, Any], Any]


class _Forwarding(ContextFreeProcessor):
    """Binds the node's forwarder once at init: forwarding is the whole per-record hot path."""

    def init(self, context: Any) -> None:
        self.context = context
        self.forward = context.forwarder


class KStreamFilter(_Forwarding):
    def __init__(self, predicate: KV) -> None:
        self.predicate = predicate

    def process(self, record: Record) -> None:
        if self.predicate(record.key, record.value):
            self.forward(record)

    def fused_step(self) -> FusedStep:
        return FusedStep(("if not {p}predicate(k, v):", "    return"), {"predicate": self.predicate})


class KStreamFilterNot(KStreamFilter):
    def process(self, record: Record) -> None:
        if not self.predicate(record.key, record.value):
            self.forward(record)

    def fused_step(self) -> FusedStep:
        return FusedStep(("if {p}predicate(k, v):", "    return"), {"predicate": self.predicate})


class KStreamMapValues(_Forwarding):
    def __init__(self, mapper: Callable[[Any], Any]) -> None:
        self.mapper = mapper

    def process(self, record: Record) -> None:
        self.forward(
            new_tuple(Record, (record.key, self.mapper(record.value), record.timestamp, record.raw_headers))
        )

    def fused_step(self) -> FusedStep:
        return FusedStep(("v = {p}mapper(v)",), {"mapper": self.mapper})


class KStreamMapValuesWithKey(KStreamMapValues):
    def process(self, record: Record) -> None:
        self.forward(
            new_tuple(
                Record,
                (record.key, self.mapper(record.key, record.value), record.timestamp, record.raw_headers),
            )
        )

    def fused_step(self) -> FusedStep:
        return FusedStep(("v = {p}mapper(k, v)",), {"mapper": self.mapper})


class KStreamMap(_Forwarding):
    """map and select_key: ``mapper(key, value)`` returns a (key, value) pair."""

    def __init__(self, mapper: KV, operator: str) -> None:
        self.mapper = mapper
        self.operator = operator

    def process(self, record: Record) -> None:
        key, value = _pair(self.mapper(record.key, record.value), self.operator)
        self.forward(new_tuple(Record, (key, value, record.timestamp, record.raw_headers)))

    def fused_step(self) -> FusedStep:
        return FusedStep(("k, v = {p}pair({p}mapper(k, v), {p}operator)",),
                         {"pair": _pair, "mapper": self.mapper, "operator": self.operator})


class KStreamSelectKey(_Forwarding):
    def __init__(self, selector: KV) -> None:
        self.selector = selector

    def process(self, record: Record) -> None:
        self.forward(
            new_tuple(
                Record,
                (self.selector(record.key, record.value), record.value, record.timestamp, record.raw_headers),
            )
        )

    def fused_step(self) -> FusedStep:
        return FusedStep(("k = {p}selector(k, v)",), {"selector": self.selector})


class KStreamFlatMap(_Forwarding):
    def __init__(self, mapper: KV) -> None:
        self.mapper = mapper

    def process(self, record: Record) -> None:
        for pair in self.mapper(record.key, record.value) or ():
            key, value = _pair(pair, "flat_map")
            self.forward(new_tuple(Record, (key, value, record.timestamp, record.raw_headers)))


class KStreamFlatMapValues(_Forwarding):
    def __init__(self, mapper: KV) -> None:
        self.mapper = mapper

    def process(self, record: Record) -> None:
        for value in self.mapper(record.key, record.value) or ():
            self.forward(new_tuple(Record, (record.key, value, record.timestamp, record.raw_headers)))


class KStreamPeek(ContextFreeProcessor):
    """peek (forwards after the action) and foreach (terminal: ``forward_downstream`` False)."""

    def __init__(self, action: KV, forward_downstream: bool) -> None:
        self.action = action
        self.forward_downstream = forward_downstream

    def process(self, record: Record) -> None:
        self.action(record.key, record.value)
        if self.forward_downstream:
            self.context.forward(record)

    def fused_step(self) -> FusedStep:
        return FusedStep(("{p}action(k, v)",), {"action": self.action}, terminal=not self.forward_downstream)


class KStreamPrint(ContextFreeProcessor):
    """print: a line ``[label]: mapped`` per record to stdout, or appended to the Printed file."""

    def __init__(self, path: str | None, label: str, mapper: KV | None) -> None:
        self.path = path
        self.label = label
        self.mapper = mapper or _key_comma_value

    def init(self, context: Any) -> None:
        self.output: TextIO = sys.stdout if self.path is None else open(  # noqa: SIM115 - closed in close()
            self.path, "a", encoding="utf-8")

    def process(self, record: Record) -> None:
        print(f"[{self.label}]: {self.mapper(record.key, record.value)}", file=self.output, flush=True)

    def close(self) -> None:
        if self.path is not None:
            self.output.close()


def _key_comma_value(key: Any, value: Any) -> str:
    return f"{key}, {value}"


class KStreamBranch(ContextFreeProcessor):
    """Forwards each record to the child of the first predicate it satisfies (or the default child)."""

    def __init__(self, predicates: Sequence[KV], children: Sequence[str], default_child: str | None) -> None:
        self.predicates = list(predicates)
        self.children = list(children)
        self.default_child = default_child

    def process(self, record: Record) -> None:
        for predicate, child in zip(self.predicates, self.children, strict=True):
            if predicate(record.key, record.value):
                self.context.forward(record, child)
                return
        if self.default_child is not None:
            self.context.forward(record, self.default_child)


class PassThrough(_Forwarding):
    """merge, and the branches of split: forwards every record unchanged."""

    def process(self, record: Record) -> None:
        self.forward(record)

    def fused_step(self) -> FusedStep:
        return FusedStep((), {})


class DropNullKeys(ContextFreeProcessor):
    """Before a repartition sink: a record without a key has no partition to go to (Kafka drops it)."""

    def process(self, record: Record) -> None:
        if record.key is not None:
            self.context.forward(record)

    def fused_step(self) -> FusedStep:
        return FusedStep(("if k is None:", "    return"), {})


def _pair(result: Any, operator: str) -> tuple[Any, Any]:
    try:
        key, value = result
    except (TypeError, ValueError):
        raise ProcessingError(
            f"The mapper of {operator} must return a (key, value) pair, got {result!r}."
        ) from None
    return key, value
