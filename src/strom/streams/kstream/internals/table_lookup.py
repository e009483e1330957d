"""Joins read tables through their stores: a table that has none gets one (Kafka's value getters
are backed by a materialized store in the same way)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.streams.state.internals.metered import MeteredVersionedKeyValueStore

if TYPE_CHECKING:
    from strom.streams.kstream.ktable import KTable


def ensure_materialized(table: KTable) -> str:
    """The name of the timestamped store holding ``table``'s current values, created if needed."""
    supplier = table.supplier
    if supplier.store_name is None:
        if table._materialize_on_demand is not None:
            table._materialize_on_demand()
        else:
            table._materialize(None, table.builder.store_name(None, f"{table.name}-"))
    assert supplier.store_name is not None
    return supplier.store_name


def value_at(store: Any) -> Callable[[Any, int], Any]:
    """How a stream record looks its key up in a table's store, ``lookup(key, record timestamp)``: a
    versioned table answers as of the record's time (KIP-914), so a late record joins the value that
    was valid when it happened; any other table answers with its current value."""
    if isinstance(store, MeteredVersionedKeyValueStore):
        return store.get
    get = store.get
    return lambda key, _timestamp: get(key)
