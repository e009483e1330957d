"""The query types and read-only views of interactive queries, over the TopologyTestDriver's stores.

Each view reads several partitions' stores as one; here each "partition" is the store of its
own driver, fed a disjoint part of the input, so the views must give back the whole input's
result. Each view is read twice: over the stores themselves (the driver's copies' way) and as a
running application's views read them, IQv2 requests through the query router to real worker
endpoints that serve the drivers' tasks (no Spark). (Querying on Spark is tested in
test_interactive_queries.py and test_queries_on_workers.py.)
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from strom.errors import ConfigError, InvalidStateStoreError
from strom.spark.queries.router import QueryRouter
from strom.spark.queries.server import QueryEndpoint
from strom.spark.queries.views import remote_view
from strom.spark.runtime.control import ThreadMetadata
from strom.streams import (
    Consumed,
    Materialized,
    QueryableStoreTypes,
    SessionWindows,
    StoreQueryParameters,
    StreamsBuilder,
    TimeWindows,
    Topology,
    TopologyTestDriver,
    ValueAndTimestamp,
)

from .wordcount import S

TOKEN = "views"
KEEP = timedelta(days=1)  # a grace that keeps every window: fetch_range reads only retained ones
WORDS = [("a", 1_000), ("b", 2_000), ("a", 3_000), ("c", 60_000), ("a", 61_000), ("b", 200_000)]


def _topology() -> Topology:
    builder = StreamsBuilder()
    grouped = builder.stream("words", Consumed.with_(S, S)).group_by_key()
    grouped.count(materialized=Materialized.as_("counts"))
    grouped.windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), KEEP)).count(
        materialized=Materialized.as_("windowed"))
    grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(timedelta(seconds=5), KEEP)).count(
        materialized=Materialized.as_("sessions"))
    return builder.build()


def _drivers(parts: list[list[tuple[str, int]]]) -> list[TopologyTestDriver]:
    drivers = []
    for part in parts:
        driver = TopologyTestDriver(_topology())
        source = driver.create_input_topic("words", S, S)
        for word, timestamp in part:
            source.pipe_input(word, word, timestamp)
        drivers.append(driver)
    return drivers


@pytest.fixture(params=["stores", "workers"])
def reads(request):
    """How views read: "stores", the stores themselves; "workers", through endpoints and the router."""
    return request.param


@pytest.fixture
def partitions(reads):
    drivers = _drivers([[w for w in WORDS if w[0] != "b"], [w for w in WORDS if w[0] == "b"]])
    held = SimpleNamespace(stores=lambda name: [d.get_state_store(name) for d in drivers], router=None)
    if reads == "stores":
        yield held
    else:
        endpoints = [QueryEndpoint(TOKEN, "127.0.0.1", "127.0.0.1") for _ in drivers]
        threads = []
        for p, (endpoint, driver) in enumerate(zip(endpoints, drivers, strict=True)):
            running = SimpleNamespace(open=SimpleNamespace(task=driver.tasks[0]))
            endpoint.thread = SimpleNamespace(tasks={f"0_{p}": running}, standbys={})
            threads.append(ThreadMetadata(f"stream-thread-{p}", "RUNNING", [f"0_{p}"], "h", p + 1, 1,
                                          query_address=endpoint.address))
        router = QueryRouter("views", dict.fromkeys(["counts", "windowed", "sessions"], (0, 2)),
                             lambda: (threads, TOKEN), lambda store: S.serializer())
        held.router = router
        yield held
        router.close()
        for endpoint in endpoints:
            endpoint.close()
    for driver in drivers:
        driver.close()


def _view(query_type, partitions, name):
    stores = partitions.stores(name)
    assert all(query_type.accepts(s) for s in stores)
    if partitions.router is None:
        return query_type.view(name, stores)
    params = StoreQueryParameters.from_name(name, query_type)
    builder = _topology().internal.store_builders[name]
    return remote_view(params, builder, 2, partitions.router.query, lambda: True)


def test_key_value_views_read_every_partition(partitions):
    plain = _view(QueryableStoreTypes.key_value_store(), partitions, "counts")
    assert (plain.get("a"), plain.get("b"), plain.get("zz")) == (3, 2, None)
    assert sorted(plain.all()) == [("a", 3), ("b", 2), ("c", 1)]
    assert sorted(plain.range("b", "c")) == [("b", 2), ("c", 1)]
    assert sorted(plain.reverse_all()) == sorted(plain.all())
    assert list(plain.prefix_scan("b", S.serializer())) == [("b", 2)]
    assert plain.approximate_num_entries() >= 3
    stamped = _view(QueryableStoreTypes.timestamped_key_value_store(), partitions, "counts")
    assert stamped.get("b") == ValueAndTimestamp(2, 200_000)


def test_window_views_fetch_by_key_and_time(partitions):
    windows = _view(QueryableStoreTypes.window_store(), partitions, "windowed")
    assert windows.fetch("a", 0) == 2
    assert windows.fetch("b", 200_000) == 1
    assert windows.fetch("a", 10_000) is None
    assert list(windows.fetch_range("a", 0, 100_000)) == [(0, 2), (60_000, 1)]
    assert list(windows.backward_fetch_range("a", 0, 100_000)) == [(60_000, 1), (0, 2)]
    assert sorted((w.key, w.window.start, n) for w, n in windows.fetch_all(0, 100_000)) == [
        ("a", 0, 2), ("a", 60_000, 1), ("b", 0, 1), ("c", 60_000, 1)]
    assert len(list(windows.all())) == 5
    stamped = _view(QueryableStoreTypes.timestamped_window_store(), partitions, "windowed")
    assert stamped.fetch("a", 0) == ValueAndTimestamp(2, 3_000)


def test_session_view_finds_sessions(partitions):
    sessions = _view(QueryableStoreTypes.session_store(), partitions, "sessions")
    assert [(w.window.start, w.window.end, n) for w, n in sessions.fetch("a")] == [
        (1_000, 3_000, 2), (61_000, 61_000, 1)]
    assert [n for _, n in sessions.find_sessions("a", 50_000, 70_000)] == [1]
    assert sessions.fetch_session("b", 200_000, 200_000) == 1
    assert sessions.fetch_session("b", 1, 2) is None


def test_types_accept_only_their_kind_of_store(partitions):
    counts, windowed, sessions = (partitions.stores(n)[0] for n in ("counts", "windowed", "sessions"))
    kv, tkv = QueryableStoreTypes.key_value_store(), QueryableStoreTypes.timestamped_key_value_store()
    window, session = QueryableStoreTypes.window_store(), QueryableStoreTypes.session_store()
    assert kv.accepts(counts) and tkv.accepts(counts)
    assert not kv.accepts(windowed) and not window.accepts(counts) and not session.accepts(windowed)
    assert window.accepts(windowed) and QueryableStoreTypes.timestamped_window_store().accepts(windowed)
    assert session.accepts(sessions) and not kv.accepts(sessions)


def test_store_query_parameters():
    kv = QueryableStoreTypes.key_value_store()
    params = StoreQueryParameters.from_name("counts", kv)
    assert (params.store_name, params.partition, params.stale_stores) == ("counts", None, False)
    assert params.with_partition(3).enable_stale_stores() == StoreQueryParameters("counts", kv, 3, True)
    with pytest.raises(ConfigError, match="not a queryable store type"):
        StoreQueryParameters.from_name("counts", "key_value_store")
    with pytest.raises(ConfigError, match="partition number"):
        params.with_partition(-1)


def test_views_of_closed_stores_say_so():
    driver = _drivers([WORDS])[0]
    views = [query_type.view(name, [driver.get_state_store(name)]) for query_type, name in (
        (QueryableStoreTypes.key_value_store(), "counts"), (QueryableStoreTypes.window_store(), "windowed"),
        (QueryableStoreTypes.session_store(), "sessions"))]
    assert views[0].get("a") == 3
    driver.close()
    for read in (lambda: views[0].get("a"), lambda: views[0].all(), lambda: views[1].fetch("a", 0),
                 lambda: views[2].fetch("a"), views[0].approximate_num_entries):
        with pytest.raises(InvalidStateStoreError, match=r"'(counts|windowed|sessions)' is closed"):
            read()
