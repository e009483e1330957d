"""Kafka's IQv1 ``store()`` views, answered by IQv2 requests to the workers.

``SparkStreams.store(StoreQueryParameters.from_name("counts", QueryableStoreTypes.key_value_store()))``
returns the same read-only views as before (``strom.streams.query.stores``), over one ``RemoteStore``
that turns each read into a request through the ``QueryRouter``: active tasks only, unless
``enable_stale_stores()`` lets standbys answer. A read that a partition could not answer raises
InvalidStateStoreError with the reason (retriable ones say so): a view never answers from part of
the store as if it were all of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from strom.errors import InvalidStateStoreError
from strom.streams.query.evaluate import MAX_RESULTS, PrefixScanQuery, TimestampedWindows
from strom.streams.query.requests import (
    KeyQuery,
    Query,
    RangeQuery,
    StateQueryRequest,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from strom.streams.query.stores import (
    ReadOnlyKeyValueStore,
    ReadOnlySessionStore,
    ReadOnlyVersionedKeyValueStore,
    ReadOnlyWindowStore,
    StoreQueryParameters,
)
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP

__all__ = ["RemoteStore", "check_type", "remote_view"]


class RemoteStore:
    """One store of a running application, all of its partitions or one, read through IQv2."""

    def __init__(self, params: StoreQueryParameters, query: Callable[[StateQueryRequest], Any],
                 running: Callable[[], bool]) -> None:
        self.name = params.store_name
        self._params = params
        self._query = query
        self._running = running
        self._timestamped = params.query_type.name.startswith("timestamped")

    @property
    def is_open(self) -> bool:
        return self._running()

    def _ask(self, query: Query) -> list[Any]:
        """Each asked partition's result, in partition order (a global store's one); any failure raises."""
        request = StateQueryRequest.in_store(self.name).with_query(query)
        if self._params.partition is not None:
            request = request.with_partitions([self._params.partition])
        if not self._params.stale_stores:
            request = request.require_active()
        result = self._query(request)
        answers = result.partition_results if result.global_result is None else {0: result.global_result}
        failed = {p: r for p, r in answers.items() if r.is_failure()}
        if failed:
            partition, first = min(failed.items())
            retry = " (retriable)" if first.failure_reason.retriable else ""
            raise InvalidStateStoreError(f"Store {self.name!r}: partition {partition} could not answer"
                                         f"{retry}: {first.failure_reason.value}: {first.failure_message}")
        return [answers[p].result for p in sorted(answers)]

    def _first(self, query: Query) -> Any:
        return next((found for found in self._ask(query) if found is not None), None)

    def _scan(self, query: Query) -> Iterator[Any]:
        for entries in self._ask(query):
            if len(entries) >= MAX_RESULTS:
                raise InvalidStateStoreError(f"Store {self.name!r}: a partition has more than {MAX_RESULTS} "
                                             "entries in the range; ask narrower ranges.")
            yield from entries

    # ---- key-value -----------------------------------------------------------------------------
    def get(self, key: Any, as_of_timestamp: int | None = None) -> Any:
        if self._params.query_type.name == "versioned_key_value_store":
            query = VersionedKeyQuery.with_key(key)
            return self._first(query if as_of_timestamp is None else query.as_of(as_of_timestamp))
        return self._first(TimestampedKeyQuery.with_key(key) if self._timestamped else KeyQuery.with_key(key))

    def _range(self, from_key: Any, to_key: Any, descending: bool) -> Iterator[tuple[Any, Any]]:
        kind = TimestampedRangeQuery if self._timestamped else RangeQuery
        query = kind(from_key, to_key, descending)
        return self._scan(query)

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return self._range(from_key, to_key, False)

    def reverse_range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return self._range(from_key, to_key, True)

    def all(self) -> Iterator[tuple[Any, Any]]:
        if self._params.query_type.name.endswith("window_store"):
            return self.fetch_all(0, MAX_TIMESTAMP)
        return self.range(None, None)

    def reverse_all(self) -> Iterator[tuple[Any, Any]]:
        return self.reverse_range(None, None)

    def approximate_num_entries(self) -> int:
        """Counted from a scan (the workers' stores are not asked for estimates)."""
        return sum(1 for _ in self.range(None, None))

    def prefix_scan(self, prefix: Any, prefix_key_serializer: Any) -> Iterator[tuple[Any, Any]]:
        """Per partition in key order (the serializer travels to the workers: it must be picklable)."""
        return self._scan(PrefixScanQuery(prefix, prefix_key_serializer, self._timestamped))

    # ---- windows and sessions ------------------------------------------------------------------
    def fetch(self, key: Any, window_start: int | None = None) -> Any:
        if window_start is None:  # a session store's every session of the key
            return self._scan(WindowRangeQuery.with_key(key))
        windows = self.fetch_range(key, window_start, window_start)
        return next((value for _, value in windows), None)

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        windows = WindowKeyQuery.with_key_and_window_start_range(key, time_from, time_to)
        return self._scan(self._windows(windows))

    def backward_fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        return reversed(list(self.fetch_range(key, time_from, time_to)))

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Any, Any]]:
        return self._scan(self._windows(WindowRangeQuery.with_window_start_range(time_from, time_to)))

    def _windows(self, query: WindowKeyQuery | WindowRangeQuery) -> Query:
        return TimestampedWindows(query) if self._timestamped else query

    def fetch_key_range(self, key_from: Any, key_to: Any, time_from: int, time_to: int) -> Iterator[Any]:
        """The windows of every key, filtered by key here: the keys' own order, not their bytes'."""
        return ((windowed, value) for windowed, value in self.fetch_all(time_from, time_to)
                if (key_from is None or windowed.key >= key_from)
                and (key_to is None or windowed.key <= key_to))

    def backward_fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                                 time_to: int) -> Iterator[Any]:
        return reversed(list(self.fetch_key_range(key_from, key_to, time_from, time_to)))

    def find_sessions(self, key: Any, earliest_session_end: int, latest_session_start: int) -> Iterator[Any]:
        return ((session, value) for session, value in self.fetch(key)
                if session.window.end >= earliest_session_end
                and session.window.start <= latest_session_start)

    def fetch_session(self, key: Any, session_start: int, session_end: int) -> Any:
        return next((value for session, value in self.fetch(key)
                     if (session.window.start, session.window.end) == (session_start, session_end)), None)


_VIEWS: dict[str, Callable[[str, list[Any]], Any]] = {
    "key_value_store": ReadOnlyKeyValueStore,
    "timestamped_key_value_store": ReadOnlyKeyValueStore,
    "versioned_key_value_store": ReadOnlyVersionedKeyValueStore,
    "window_store": ReadOnlyWindowStore,
    "timestamped_window_store": ReadOnlyWindowStore,
    "session_store": ReadOnlySessionStore,
}


def remote_view(params: StoreQueryParameters, store_builder: Any, partitions: int | None,
                query: Callable[[StateQueryRequest], Any], running: Callable[[], bool]) -> Any:
    """The IQv1 view ``params`` asks for, read through ``query``; ``partitions``: the store's (None: a
    global store)."""
    if params.partition is not None and partitions is None:
        raise InvalidStateStoreError(f"Store {params.store_name!r} is a global store: every instance "
                                     "holds all of it, so it has no partition to choose.")
    if params.partition is not None and params.partition >= partitions:  # type: ignore[operator]
        raise InvalidStateStoreError(
            f"Store {params.store_name!r} has partitions 0 to {partitions - 1} (one per task); "  # type: ignore[operator]
            f"there is no partition {params.partition}.")
    check_type(params, store_builder)
    view = _VIEWS.get(params.query_type.name)
    if view is None:
        raise InvalidStateStoreError(f"Store {params.store_name!r}: {params.query_type.name} is not served "
                                     "by the running application's tasks; query it as one of "
                                     f"{sorted(_VIEWS)}.")
    return view(params.store_name, [RemoteStore(params, query, running)])


def check_type(params: StoreQueryParameters, store_builder: Any) -> None:
    store = store_builder.build()  # not opened: only its kind
    if not params.query_type.accepts(store):
        raise InvalidStateStoreError(
            f"Store {params.store_name!r} is a {type(store).__name__}; it cannot be queried as "
            f"{params.query_type.name}. Pass the QueryableStoreTypes method of the store's kind "
            "(key_value_store, timestamped_key_value_store, versioned_key_value_store, window_store, "
            "timestamped_window_store or session_store).")
