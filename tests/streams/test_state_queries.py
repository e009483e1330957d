"""IQv2 on the TopologyTestDriver: every query type against the driver's own store reads, positions
and position bounds, committed state only (a write not committed yet is not seen), and the answers a
wrong query gets."""

from __future__ import annotations

from datetime import timedelta

import pytest

from strom.errors import ConfigError, InvalidStateStoreError
from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    FailureReason,
    KeyQuery,
    Materialized,
    MultiVersionedKeyQuery,
    Position,
    PositionBound,
    RangeQuery,
    SessionWindows,
    StateQueryRequest,
    StreamsBuilder,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    TimeWindows,
    TopologyTestDriver,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRecord,
    WindowKeyQuery,
    WindowRangeQuery,
)
from strom.streams.state.stores import Stores

S = Serdes.String()
L = Serdes.Long()


def _topology(caching: bool = True):
    builder = StreamsBuilder()
    words = builder.stream("words", Consumed.with_(S, S)).group_by_key()
    counts = Materialized.as_("counts")
    words.count(materialized=counts if caching else counts.with_caching_disabled())
    words.windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(days=1))).count(
        materialized=Materialized.as_("per-10s"))
    words.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(timedelta(seconds=5))).count(
        materialized=Materialized.as_("sessions"))
    builder.table("prices", Consumed.with_(S, S),
                  Materialized.as_(Stores.persistent_versioned_key_value_store("prices", 60_000)))
    return builder.build()


def _ask(driver, store, query):
    return driver.query(StateQueryRequest.in_store(store).with_query(query))


def _only(driver, store, query):
    return _ask(driver, store, query).get_only_partition_result().get_result()


@pytest.fixture
def driver(props):
    with TopologyTestDriver(_topology(), props) as driver:
        words = driver.create_input_topic("words", S, S)
        for i, word in enumerate(["a", "b", "a", "c", "a", "b"]):
            words.pipe_input(word, "x", timestamp=1_000 + i * 4_000)
        prices = driver.create_input_topic("prices", S, S)
        prices.pipe_input("apple", "1.00", timestamp=1000)
        prices.pipe_input("apple", "1.20", timestamp=3000)
        prices.pipe_input("pear", "2.00", timestamp=2000)
        yield driver


def test_key_and_range_queries_answer_what_the_store_holds(driver):
    counts = driver.get_key_value_store("counts")
    for word in "abcz":
        assert _only(driver, "counts", KeyQuery.with_key(word)) == counts.get(word)
    assert _only(driver, "counts", KeyQuery.with_key("a")) == 3
    stamped = _only(driver, "counts", TimestampedKeyQuery.with_key("a"))
    assert stamped == ValueAndTimestamp(3, 17_000)
    assert _only(driver, "counts", RangeQuery.with_range("a", "b")) == [("a", 3), ("b", 2)]
    assert _only(driver, "counts", RangeQuery.with_no_bounds().with_descending_keys()) == [
        ("c", 1), ("b", 2), ("a", 3)]
    assert _only(driver, "counts", RangeQuery.with_lower_bound("b")) == list(counts.range("b", None))
    assert _only(driver, "counts", TimestampedRangeQuery.with_upper_bound("a")) == [
        ("a", ValueAndTimestamp(3, 17_000))]


def test_window_and_session_queries_answer_what_the_stores_hold(driver):
    windows = driver.get_window_store("per-10s")
    assert _only(driver, "per-10s", WindowKeyQuery.with_key_and_window_start_range("a", 0, 30_000)) == list(
        windows.fetch_range("a", 0, 30_000)) == [(0, 2), (10_000, 1)]
    every = _only(driver, "per-10s", WindowRangeQuery.with_window_start_range(0, 10_000))
    assert [(w.key, w.window.start, n) for w, n in every] == [
        (w.key, w.window.start, n) for w, n in windows.fetch_all(0, 10_000)]
    assert ("b", 0, 1) in [(w.key, w.window.start, n) for w, n in every]
    sessions = _only(driver, "sessions", WindowRangeQuery.with_key("a"))
    assert [(w.window.start, w.window.end, n) for w, n in sessions] == [
        (w.window.start, w.window.end, n) for w, n in driver.get_session_store("sessions").fetch("a")]
    assert [(w.window.start, n) for w, n in sessions] == [(17_000, 1)]  # the older ones expired (no grace)


def test_versioned_queries_answer_the_latest_a_past_and_every_version(driver):
    assert _only(driver, "prices", VersionedKeyQuery.with_key("apple")) == VersionedRecord("1.20", 3000)
    assert _only(driver, "prices", VersionedKeyQuery.with_key("apple").as_of(2000)) == VersionedRecord(
        "1.00", 1000, 3000)
    assert _only(driver, "prices", VersionedKeyQuery.with_key("apple").as_of(500)) is None
    history = MultiVersionedKeyQuery.with_key("apple")
    assert _only(driver, "prices", history) == [
        VersionedRecord("1.20", 3000), VersionedRecord("1.00", 1000, 3000)]
    assert _only(driver, "prices", history.from_time(3500).with_ascending_timestamps()) == [
        VersionedRecord("1.20", 3000)]
    assert _only(driver, "prices", history.to_time(2500)) == [VersionedRecord("1.00", 1000, 3000)]


def test_every_version_is_answered_also_the_ones_before_a_deletion(driver):
    """As Kafka's versioned store: a deletion ends a version and is none itself; the versions before it
    are answered. Each answer is also checked against the store's own as-of reads: the versions valid
    at some time of the range, no more, no less."""
    prices = driver.create_input_topic("prices", S, S)
    for value, timestamp in [("2.10", 2500), (None, 3000), ("2.40", 4000), (None, 4500), ("2.60", 5500)]:
        prices.pipe_input("pear", value, timestamp=timestamp)
    history = MultiVersionedKeyQuery.with_key("pear")
    assert _only(driver, "prices", history) == [
        VersionedRecord("2.60", 5500), VersionedRecord("2.40", 4000, 4500),
        VersionedRecord("2.10", 2500, 3000), VersionedRecord("2.00", 2000, 2500)]
    store = driver.get_versioned_key_value_store("prices")
    for time_from, time_to in [(0, 10_000), (3000, 3999), (2999, 4000), (4500, 5499), (4499, 5500),
                               (0, 2000)]:
        asked = history.from_time(time_from).to_time(time_to)
        valid = {store.get("pear", t) for t in [*range(time_from, time_to, 50), time_to]} - {None}
        answer = _only(driver, "prices", asked)
        assert answer == sorted(valid, key=lambda v: -v.timestamp), (time_from, time_to)
        assert _only(driver, "prices", asked.with_ascending_timestamps()) == answer[::-1]
    assert _only(driver, "prices", history.from_time(3000).to_time(3999)) == []  # deleted all along


def test_positions_say_which_input_records_an_answer_includes_and_bounds_hold_back_older_stores(driver):
    result = _ask(driver, "counts", KeyQuery.with_key("a"))
    assert result.get_position() == Position.empty().with_component("words", 0, 5)
    reached = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("a"))
    at_5 = PositionBound.at(Position.empty().with_component("words", 0, 5))
    assert driver.query(reached.with_position_bound(at_5)).get_only_partition_result().get_result() == 3
    ahead = driver.query(reached.with_position_bound(
        PositionBound.at(Position.empty().with_component("words", 0, 6))))
    failed = ahead.partition_results[0]
    assert failed.failure_reason is FailureReason.NOT_UP_TO_BOUND and failed.failure_reason.retriable
    driver.create_input_topic("words", S, S).pipe_input("a", "x", timestamp=30_000)
    assert driver.query(reached.with_position_bound(
        PositionBound.at(Position.empty().with_component("words", 0, 6)))).partition_results[0].result == 4


def test_a_write_not_committed_yet_is_not_seen(props):
    with TopologyTestDriver(_topology(), props, commit_per_record=False) as driver:
        words = driver.create_input_topic("words", S, S)
        words.pipe_input("a", "x", timestamp=1000)
        words.pipe_input("b", "x", timestamp=1000)
        assert driver.get_key_value_store("counts").get("a") == 1  # the task reads its own writes
        assert _only(driver, "counts", KeyQuery.with_key("a")) is None
        assert _only(driver, "per-10s", WindowKeyQuery.with_key_and_window_start_range("a", 0, 9)) == []
        assert _only(driver, "counts", RangeQuery.with_no_bounds()) == []
        assert _ask(driver, "counts", KeyQuery.with_key("a")).get_position() == Position.empty()
        driver.commit()
        assert _only(driver, "counts", RangeQuery.with_no_bounds()) == [("a", 1), ("b", 1)]
        first_window = WindowKeyQuery.with_key_and_window_start_range("a", 0, 10)
        assert _only(driver, "per-10s", first_window) == [(0, 1)]
        words.pipe_input("a", "x", timestamp=2000)
        assert _only(driver, "counts", KeyQuery.with_key("a")) == 1
        position = _ask(driver, "counts", KeyQuery.with_key("a")).get_position()
        assert position == Position.empty().with_component("words", 0, 1)


def test_wrong_queries_get_clear_answers(driver):
    window_query = WindowKeyQuery.with_key_and_window_start_range("a", 0, 1)
    wrong = _ask(driver, "counts", window_query).partition_results[0]
    assert wrong.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE and "KeyQuery" in wrong.failure_message
    with pytest.raises(InvalidStateStoreError, match="UNKNOWN_QUERY_TYPE"):
        wrong.get_result()
    assert _ask(driver, "prices", KeyQuery.with_key("apple")).partition_results[0].failure_reason is (
        FailureReason.UNKNOWN_QUERY_TYPE)
    with pytest.raises(InvalidStateStoreError, match="No state store named 'nope'"):
        _ask(driver, "nope", KeyQuery.with_key("a"))
    with pytest.raises(ConfigError, match="needs a key"):
        KeyQuery.with_key(None)
    with pytest.raises(ConfigError, match="not a query"):
        StateQueryRequest.in_store("counts").with_query("a")
    assert _ask(driver, "counts", KeyQuery.with_key("a")).get_only_partition_result().is_success()
    request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("a"))
    assert driver.query(request.with_partitions([3])).partition_results == {}
