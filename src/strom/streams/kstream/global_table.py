"""GlobalKTable: a table replicated in full to every task (``StreamsBuilder.global_table``).

A global table's store is filled from *every* partition of its topic, once per application instance,
and read by all tasks; stream records join it on ``key_selector(key, value)``, so no co-partitioning
or repartitioning is needed. Its wiring is in ``kstream.internals.global_store``, its runtime state in
``processor.internals.global_state``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder
    from strom.streams.processor.internals.global_state import GlobalStoreSpec

__all__ = ["GlobalKTable"]


class GlobalKTable:
    """A table readable by every task: ``KStream.join(table, key_selector, joiner)``."""

    def __init__(self, builder: InternalStreamsBuilder, spec: GlobalStoreSpec) -> None:
        self.builder = builder
        self.spec = spec

    @property
    def queryable_store_name(self) -> str:
        return self.spec.name
