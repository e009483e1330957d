"""Kafka's StreamPartitioner: which partitions of an output topic a record goes to.

KIP-837: ``partitions(topic, key, value, num_partitions)`` returns None (the default partitioner: the
key's murmur2 hash), an empty set (the record is dropped), or a set of partitions (the record is sent to
each: multicast). A subclass may instead override the older ``partition(...)`` (one partition or None).
A plain function ``(topic, key, value) -> partition or None`` (strom's older shape) still works.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from strom.errors import TopologyError

__all__ = [
    "StreamPartitioner",
]

Partitions = set[int] | frozenset[int] | None
Chooser = Callable[[str, Any, Any, Callable[[str], int]], Partitions]
"""(topic, key, value, partition_count(topic)) -> partitions; counts are asked only when needed."""


class StreamPartitioner:
    """Kafka's StreamPartitioner: override ``partitions`` (multicast) or ``partition``."""

    def partition(self, topic: str, key: Any, value: Any, num_partitions: int) -> int | None:
        """One partition, or None for the default partitioner."""
        return None

    def partitions(self, topic: str, key: Any, value: Any, num_partitions: int) -> Partitions:
        """The partitions to send to (empty: drop the record), or None for the default partitioner."""
        partition = self.partition(topic, key, value, num_partitions)
        return None if partition is None else {partition}


def partition_chooser(partitioner: Any) -> Chooser:
    """One calling convention for every shape a partitioner may have."""
    if isinstance(partitioner, StreamPartitioner) or callable(getattr(partitioner, "partitions", None)):
        def by_partitions(topic: str, key: Any, value: Any, count: Callable[[str], int]) -> Partitions:
            return partitioner.partitions(topic, key, value, count(topic))

        return by_partitions
    if callable(getattr(partitioner, "partition", None)):
        def by_partition(topic: str, key: Any, value: Any, count: Callable[[str], int]) -> Partitions:
            partition = partitioner.partition(topic, key, value, count(topic))
            return None if partition is None else {partition}

        return by_partition
    if callable(partitioner):
        takes_count = _positional_arity(partitioner) >= 4

        def by_function(topic: str, key: Any, value: Any, count: Callable[[str], int]) -> Partitions:
            partition = partitioner(topic, key, value, count(topic)) if takes_count else \
                partitioner(topic, key, value)
            return None if partition is None else {partition}

        return by_function
    raise TopologyError(f"{partitioner!r} is no StreamPartitioner: give a StreamPartitioner (partitions or "
                        "partition) or a function (topic, key, value[, num_partitions]) -> partition.")


def _positional_arity(fn: Callable[..., Any]) -> int:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 3
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        return 4
    return sum(1 for p in parameters if p.kind in kinds)
