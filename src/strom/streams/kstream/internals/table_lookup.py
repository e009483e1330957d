"""How a stream record looks its key up in a table's store (stream-table and stream-global-table joins)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.streams.state.internals.metered import MeteredVersionedKeyValueStore


def value_at(store: Any) -> Callable[[Any, int | None], Any]:
    """``lookup(key, record timestamp)``: a versioned table answers as of the record's time (KIP-914), so
    a late record joins the value that was valid when it happened (its latest without a time); any other
    table answers with its current value."""
    if isinstance(store, MeteredVersionedKeyValueStore):
        return store.get
    get = store.get
    return lambda key, _timestamp=None: get(key)
