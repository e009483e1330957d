"""How an operator reads a table's current value per key (Kafka's KTableValueGetterSupplier).

A table with a store is read from it. A table without one (a filter, map_values or transform_values
result or a primary-key join's result not materialized, a suppress) is read as Kafka Streams reads it:
through its parent's getter, applying the table's own function on the fly (``KTable.view``).
So no store is added for a reader, and the reader sees what Kafka's sees: the parents' stores at the
moment of reading, which within one input record can be ahead of what the table itself has processed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.streams.kstream.internals.table_lookup import value_at

UNKNOWN_TIMESTAMP = -1
"""The timestamp of a value whose record is not known (Kafka's RecordQueue.UNKNOWN)."""


class ValueGetter:
    """One reader's getter: ``get(key, as_of)`` returns a ValueAndTimestamp, or None for no value.
    ``as_of`` (a stream-table join's record time) matters to a versioned store only; getters that are
    not versioned in Kafka (a join's result, suppress) read their parents' latest values."""

    def init(self, context: Any) -> None:
        """Opens the stores it reads (connected to the reading processor)."""

    def get(self, key: Any, as_of: int | None = None) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Called when the reading processor closes."""


class StoreValueGetter(ValueGetter):
    """A table's own store; a versioned one answers as of ``as_of`` (KIP-914)."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: Any) -> None:
        self.get = value_at(context.get_state_store(self.store_name))  # type: ignore[method-assign]


class DerivedValueGetter(ValueGetter):
    """A getter computed from its parent's: ``init`` and ``close`` reach the parent."""

    def __init__(self, parent: ValueGetter) -> None:
        self.parent = parent

    def init(self, context: Any) -> None:
        self.parent.init(context)

    def close(self) -> None:
        self.parent.close()


@dataclass(frozen=True)
class ValueGetterSupplier:
    """Makes a getter per reading processor; ``store_names`` are the stores it reads, which the builder
    connects to that processor."""

    store_names: tuple[str, ...]
    make: Callable[[], ValueGetter]

    def get(self) -> ValueGetter:
        return self.make()

    def derived(self, make: Callable[[ValueGetter], ValueGetter], *store_names: str) -> ValueGetterSupplier:
        """A getter applying ``make(parent getter)`` over this one's, reading ``store_names`` as well."""
        stores = tuple(dict.fromkeys((*self.store_names, *store_names)))
        return ValueGetterSupplier(stores, lambda: make(self.make()))


def stored_values(store_name: str) -> ValueGetterSupplier:
    return ValueGetterSupplier((store_name,), lambda: StoreValueGetter(store_name))
