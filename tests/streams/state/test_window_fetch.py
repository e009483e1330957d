"""Window stores read with Kafka's argument lists: ``fetch(key, time)``, ``fetch(key, from, to)``,
``fetch(key_from, key_to, from, to)`` and ``backward_fetch`` with three or four, the same in the store a
processor uses, the test driver's plain-value view and the interactive-query view."""

from __future__ import annotations

from datetime import timedelta

import pytest

from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    Materialized,
    QueryableStoreTypes,
    StreamsBuilder,
    TimeWindows,
    TopologyTestDriver,
    ValueAndTimestamp,
)

S = Serdes.String()
WORDS = [("a", 1_000), ("b", 2_000), ("a", 3_000), ("c", 12_000), ("a", 21_000), ("b", 25_000)]


@pytest.fixture
def driver(props):
    builder = StreamsBuilder()
    (builder.stream("words", Consumed.with_(S, S)).group_by_key()
     .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(days=1)))
     .count(materialized=Materialized.as_("windowed")))
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("words", S, S)
        for word, timestamp in WORDS:
            source.pipe_input(word, word, timestamp)
        yield driver


def _stores(driver):
    view = QueryableStoreTypes.window_store().view("windowed", [driver.get_state_store("windowed")])
    return {
        "processor's store": (driver.get_state_store("windowed"), lambda v: v.value),
        "driver's window store": (driver.get_window_store("windowed"), lambda v: v),
        "query view": (view, lambda v: v),
    }


def test_fetch_overloads_read_as_the_explicit_reads(driver):
    for name, (store, plain) in _stores(driver).items():
        assert plain(store.fetch("a", 0)) == 2, name
        assert [(start, plain(v)) for start, v in store.fetch("a", 0, 30_000)] == [(0, 2), (20_000, 1)], name
        assert [(start, plain(v)) for start, v in store.backward_fetch("a", 0, 30_000)] == [
            (20_000, 1), (0, 2)], name
        assert list(store.fetch("a", 0, 30_000)) == list(store.fetch_range("a", 0, 30_000)), name
        by_key = [(w.key, w.window.start, plain(v)) for w, v in store.fetch("a", "b", 0, 30_000)]
        assert sorted(by_key) == [("a", 0, 2), ("a", 20_000, 1), ("b", 0, 1), ("b", 20_000, 1)], name
        backward = [(w.key, w.window.start, plain(v)) for w, v in store.backward_fetch("a", "b", 0, 30_000)]
        assert sorted(backward) == sorted(by_key), name
        assert list(store.fetch("a", "b", 0, 30_000)) == list(store.fetch_key_range("a", "b", 0, 30_000))


def test_the_processors_store_keeps_timestamps_and_wrong_arities_say_what_fetch_takes(driver):
    store = driver.get_state_store("windowed")
    assert list(store.fetch("b", 0, 10_000)) == [(0, ValueAndTimestamp(1, 2_000))]
    for read, args in ((store.fetch, ("a", 0, 1, 2, 3)), (store.backward_fetch, ("a", 0))):
        with pytest.raises(TypeError, match=r"takes \(key, time_from, time_to\)"):
            read(*args)
