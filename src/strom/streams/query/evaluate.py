"""Answering IQv2 queries from a process's own stores, as they stand at their last commit.

A query reads a store's **committed** state: a copy of the store's layers without the record cache
and without the uncommitted writes (``committed_view``), over the same inner store (RocksDB or
memory). So it never sees a write of a transaction that is still open or was aborted, whatever the
processing guarantee, and it never waits for the task: a read takes as long as the store read. The
answer's position is the task's position at its last commit, read before the store: the store
holds at least what the position says.
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any

from strom.streams.query.requests import (
    FailureReason,
    KeyQuery,
    MultiVersionedKeyQuery,
    Position,
    Query,
    QueryResult,
    RangeQuery,
    StateQueryRequest,
    StateQueryResult,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from strom.streams.state.internals.caching import CachingLayer
from strom.streams.state.internals.layer import StoreLayer
from strom.streams.state.internals.metered import (
    MeteredKeyValueStore,
    MeteredSessionStore,
    MeteredTimestampedKeyValueStore,
    MeteredVersionedKeyValueStore,
    MeteredWindowStore,
)
from strom.streams.state.timestamped import ValueAndTimestamp

__all__ = ["MAX_RESULTS", "PrefixScanQuery", "TaskStores", "TimestampedWindows", "answer", "committed_view",
           "execute"]

MAX_RESULTS = 100_000
"""A range or window query answers at most this many entries per partition (its message says so):
an answer travels in one message."""
_RETRIES = 3


@dataclass(frozen=True)
class PrefixScanQuery(Query):
    """IQv1's ``prefix_scan``, which no IQv2 type of Kafka's asks: the entries whose key serialized by
    ``serializer`` starts with ``prefix`` serialized by it, in key order (ValueAndTimestamp values from
    a timestamped store when ``timestamped``). The IQv1 views of a running application send it."""

    prefix: Any
    serializer: Any
    timestamped: bool = False


@dataclass(frozen=True)
class TimestampedWindows(Query):
    """``query`` (a WindowKeyQuery or WindowRangeQuery) answered with ValueAndTimestamp values from a
    timestamped window store: IQv1's ``timestamped_window_store()`` views of a running application."""

    query: WindowKeyQuery | WindowRangeQuery


@dataclass
class TaskStores:
    """One partition's stores as a process holds them: a task's (active) or a standby's."""

    stores: Mapping[str, Any]
    position: Callable[[], Position] = field(default=Position.empty)
    standby: bool = False


def committed_view(store: Any) -> Any:
    """A read-only copy of ``store``'s layers that reads its committed state: the record cache is
    skipped and the layer that buffers uncommitted writes is replaced by its committed reader; the
    inner store is shared. Attributes a layer bound to a layer below (its per-record shortcuts) are
    bound to the copies.

    The copy is kept and reused while every copied layer's attributes are the same objects as when it
    was made (a commit, a close or an init that rebinds one makes a new copy): building one costs more
    than a key read. A change anywhere down the layers shows in the layers kept: a layer that
    replaces the one below it rebinds its ``wrapped``."""
    kept = _VIEWS.get(store)
    if kept is not None and kept[1] == _stamp(kept[0]):
        return kept[2]
    layers = list(_layers(store))
    view = _copy_layers(store)
    with contextlib.suppress(TypeError):  # a store that cannot be weakly referenced: not kept
        _VIEWS[store] = (layers, _stamp(layers), view)
    return view


_VIEWS: weakref.WeakKeyDictionary[Any, tuple[list[Any], tuple[int, ...], Any]] = weakref.WeakKeyDictionary()
"""Per store, the layers its committed view was copied from, their stamp then, and the view."""


def _layers(store: Any) -> Iterator[Any]:
    """The layers ``_copy_layers`` walks, outermost first; the layer with a committed reader is the last."""
    layer = store
    while isinstance(layer, StoreLayer) or hasattr(layer, "committed_reader"):
        yield layer
        if hasattr(layer, "committed_reader"):
            return
        layer = layer.wrapped


def _stamp(layers: list[Any]) -> tuple[int, ...]:
    """The identities of the copied layers' attributes (of a record cache, skipped: what it wraps)."""
    return tuple(map(id, chain.from_iterable(
        (layer.wrapped,) if isinstance(layer, CachingLayer) else vars(layer).values() for layer in layers)))


def _copy_layers(store: Any) -> Any:
    copies: dict[int, Any] = {}

    def build(layer: Any) -> Any:
        if isinstance(layer, CachingLayer):
            view = build(layer.wrapped)
        elif hasattr(layer, "committed_reader"):
            view = layer.committed_reader()
        elif isinstance(layer, StoreLayer):
            view = copy.copy(layer)
            view.wrapped = build(layer.wrapped)
        else:
            return layer
        copies[id(layer)] = view
        return view

    top = build(store)
    for view in copies.values():
        for name, value in list(vars(view).items()):
            target = copies.get(id(getattr(value, "__self__", None)))
            if target is not None and target is not view:
                setattr(view, name, getattr(target, value.__name__))
    return top


def answer(request: StateQueryRequest, partitions: Mapping[int, TaskStores],
           global_stores: Mapping[str, Any] | None = None) -> StateQueryResult:
    """The request answered from the partitions this process holds; partitions asked for that it
    does not hold are left out (the caller knows where they are)."""
    result = StateQueryResult()
    if global_stores and request.store_name in global_stores:
        result.global_result = _answer_one(request, TaskStores(global_stores), None)
        return result
    asked = partitions if request.partitions is None else {
        p: partitions[p] for p in request.partitions if p in partitions}
    for partition, stores in sorted(asked.items()):
        result.partition_results[partition] = _answer_one(request, stores, partition)
    return result


def _answer_one(request: StateQueryRequest, held: TaskStores, partition: int | None) -> QueryResult:
    if held.standby and request.active_only:
        return QueryResult.for_failure(FailureReason.NOT_ACTIVE, "this partition's replica here is a standby "
                                       "and the request requires the active task; retry (the active "
                                       "may be moving) or allow standbys")
    position = held.position()
    if not request.position_bound.allows(position, partition):
        return QueryResult.for_failure(
            FailureReason.NOT_UP_TO_BOUND, f"the store is at {position.to_json()}, before the bound "
            f"{request.position_bound.position.to_json()}; retry once it has committed further",  # type: ignore[union-attr]
            position)
    store = held.stores.get(request.store_name)
    if store is None:
        return QueryResult.for_failure(FailureReason.DOES_NOT_EXIST,
                                       f"no store {request.store_name!r} in this partition's task")
    if not store.is_open:
        return QueryResult.for_failure(FailureReason.NOT_PRESENT, "the store is closed (its task is moving "
                                       "or stopping); retry", position)
    for attempt in range(_RETRIES):
        try:
            value = execute(request.query, committed_view(store))  # type: ignore[arg-type]
            break
        except _Unknown as exc:
            return QueryResult.for_failure(FailureReason.UNKNOWN_QUERY_TYPE, str(exc), position)
        except RuntimeError as exc:  # an in-memory store changed under a scan by a concurrent commit
            if attempt == _RETRIES - 1:
                return QueryResult.for_failure(FailureReason.STORE_EXCEPTION, str(exc), position)
        except Exception as exc:
            return QueryResult.for_failure(FailureReason.STORE_EXCEPTION, f"{type(exc).__name__}: {exc}",
                                           position)
    return QueryResult.for_result(value, position, held.standby)


class _Unknown(Exception):
    """The store cannot answer this kind of query."""


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, ValueAndTimestamp) else value


def _limited(entries: Iterator[tuple[Any, Any]], value: Callable[[Any], Any]) -> list[tuple[Any, Any]]:
    return [(key, value(found)) for key, found in islice(entries, MAX_RESULTS)]


def execute(query: Query, store: Any) -> Any:
    """One query against one store (a committed view); _Unknown when the store's kind does not
    answer the query's type."""
    timestamped_query = isinstance(query, (TimestampedKeyQuery, TimestampedRangeQuery)) or (
        isinstance(query, PrefixScanQuery) and query.timestamped)
    if isinstance(store, MeteredVersionedKeyValueStore):
        return _versioned(query, store)
    if isinstance(store, MeteredKeyValueStore):
        if timestamped_query and not isinstance(store, MeteredTimestampedKeyValueStore):
            raise _Unknown(f"{type(query).__name__} needs a timestamped key-value store; "
                           f"{store.name!r} is a plain one: use KeyQuery or RangeQuery")
        value = (lambda found: found) if timestamped_query else _plain
        if isinstance(query, KeyQuery):
            return value(store.get(query.key))
        if isinstance(query, RangeQuery):
            scan = store.reverse_range if query.descending else store.range
            return _limited(scan(query.lower, query.upper), value)
        if isinstance(query, PrefixScanQuery):
            return _limited(store.prefix_scan(query.prefix, query.serializer), value)
    elif isinstance(store, MeteredWindowStore):
        return _windows(query, store)
    elif isinstance(store, MeteredSessionStore) and _sessions_of_key(query):
        return _limited(store.fetch(query.key), _plain)
    raise _unknown(query, store)


def _unknown(query: Query, store: Any) -> _Unknown:
    return _Unknown(f"store {store.name!r} ({type(store).__name__}) does not answer {type(query).__name__}; "
                    "key-value stores answer KeyQuery and RangeQuery, window stores WindowKeyQuery and "
                    "WindowRangeQuery.with_window_start_range, session stores WindowRangeQuery.with_key, "
                    "versioned stores VersionedKeyQuery and MultiVersionedKeyQuery")


def _windows(query: Query, store: MeteredWindowStore) -> Any:
    asked, value = query, _plain
    if isinstance(query, TimestampedWindows):
        if not store.timestamped:
            raise _Unknown(f"window store {store.name!r} keeps no timestamps: read it as window_store")
        asked, value = query.query, (lambda found: found)
    if isinstance(asked, WindowKeyQuery):
        return _limited(store.fetch_range(asked.key, asked.time_from, asked.time_to), value)
    if isinstance(asked, WindowRangeQuery) and asked.time_from is not None:
        return _limited(store.fetch_all(asked.time_from, asked.time_to), value)
    raise _unknown(query, store)


def _sessions_of_key(query: Query) -> bool:
    return isinstance(query, WindowRangeQuery) and query.key is not None


def _versioned(query: Query, store: MeteredVersionedKeyValueStore) -> Any:
    if isinstance(query, VersionedKeyQuery):
        return store.get(query.key, query.as_of_timestamp)
    if isinstance(query, MultiVersionedKeyQuery):
        return _versions(query, store)
    raise _Unknown(f"versioned store {store.name!r} answers VersionedKeyQuery and MultiVersionedKeyQuery, "
                   f"not {type(query).__name__}")


def _versions(query: MultiVersionedKeyQuery, store: MeteredVersionedKeyValueStore) -> list[Any]:
    """The versions valid at some time in [time_from, time_to], the versions before a deletion too (as
    Kafka's versioned store answers), newest first unless ascending."""
    versions = store.versions(query.key, query.time_from, query.time_to)[:MAX_RESULTS]
    return versions[::-1] if query.ascending else versions
