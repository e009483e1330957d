"""Interactive queries on Spark: the driver's store copies (the fallback of micro-batch mode and of a
stopped application) against the TopologyTestDriver's stores.

One exactly-once run counts words (a timestamped key-value store), counts them per 10 s window
(a timestamped window store) and replicates a global table; its stores are queried after each of
two rounds of input, with every query type, per partition, stale and refreshed, next to an open
and an aborted transaction on a changelog, and with the mistakes a user can make. An
at-least-once run's copies (changelogs read as written) give the driver's counts too.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from strom.errors import InvalidStateStoreError
from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.spark.runtime import SparkStreams
from strom.streams import (
    Consumed,
    Grouped,
    Materialized,
    QueryableStoreTypes,
    Repartitioned,
    StoreQueryParameters,
    StreamsBuilder,
    TimeWindows,
    Topology,
    TopologyTestDriver,
    ValueAndTimestamp,
)
from strom.streams.state.window.facade import window_store_view
from support.kafka import Record, produce

from .conftest import produce_lines
from .wordcount import S, word_count

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

WORDS = [f"w{i}" for i in range(20)]
BASE_MS = 1_700_000_000_000
WINDOW = timedelta(seconds=10)
KV = QueryableStoreTypes.key_value_store()


@pytest.fixture
def mode_props() -> dict[str, str]:
    """Micro-batch mode, whose store() reads the driver's copies (a running real-time application's stream
    threads answer themselves: test_queries_on_workers.py)."""
    return {"execution.mode": "microbatch"}


def counting(lines: str, users: str) -> Topology:
    builder = StreamsBuilder()
    words = (builder.stream(lines, Consumed.with_(S, S))
             .flat_map_values(str.split)
             .select_key(lambda key, word: word)
             .repartition(Repartitioned.with_(S, S).with_name("words"))
             .group_by_key(Grouped.with_(S, S)))
    words.count(materialized=Materialized.as_("counts"))
    (words.windowed_by(TimeWindows.of_size_and_grace(WINDOW, timedelta(days=1)))
        .count(materialized=Materialized.as_("windowed")))
    words.count(materialized=Materialized.as_("unlogged").with_logging_disabled())
    builder.global_table(users, Consumed.with_(S, S), Materialized.as_("users"))
    return builder.build()


def _lines(rng: random.Random, start: int, n: int) -> list[tuple[str, str, int]]:
    return [(f"k{i}", " ".join(rng.choices(WORDS, k=rng.randint(1, 5))), BASE_MS + i * 700)
            for i in range(start, start + n)]


def _produce(bootstrap: str, topic: str, lines: list[tuple[str, str, int]]) -> None:
    produce(bootstrap, topic, [Record(key, line, timestamp=timestamp) for key, line, timestamp in lines],
            **JAVA_PARTITIONER)


class Expected:
    """The TopologyTestDriver's stores after the same input."""

    def __init__(self, names: dict[str, str], users: list[tuple[str, str]],
                 lines: list[tuple[str, str, int]]) -> None:
        with TopologyTestDriver(counting(names["lines"], names["users"])) as driver:
            driver.create_input_topic(names["users"], S, S).pipe_record_list(users)
            source = driver.create_input_topic(names["lines"], S, S)
            for key, line, timestamp in lines:
                source.pipe_input(key, line, timestamp)
            self.counts = dict(driver.get_key_value_store("counts").all())
            self.stamped = dict(driver.get_timestamped_key_value_store("counts").all())
            self.windowed = {(w.key, w.window.start): n
                             for w, n in window_store_view(driver.get_window_store("windowed")).all()}
            self.users = dict(driver.get_key_value_store("users").all())


def _query(app: SparkStreams, name: str, query_type=KV, **options) -> object:
    params = StoreQueryParameters.from_name(name, query_type)
    if "partition" in options:
        params = params.with_partition(options["partition"])
    if options.get("stale"):
        params = params.enable_stale_stores()
    return app.store(params)


def _assert_matches(app: SparkStreams, expected: Expected) -> None:
    counts = _query(app, "counts")
    assert dict(counts.all()) == expected.counts
    assert counts.approximate_num_entries() >= len(expected.counts)  # RocksDB's estimate counts overwrites
    for word in ("w3", "w11", "nope"):
        assert counts.get(word) == expected.counts.get(word)
    in_range = {k: v for k, v in counts.range("w1", "w13")}
    assert in_range == {k: v for k, v in expected.counts.items() if "w1" <= k <= "w13"}
    partitions = [_query(app, "counts", partition=p) for p in (0, 1)]
    parts = [dict(p.all()) for p in partitions]
    assert parts[0] and parts[1] and not parts[0].keys() & parts[1].keys()
    assert {**parts[0], **parts[1]} == expected.counts
    assert sum(p.approximate_num_entries() for p in partitions) == counts.approximate_num_entries()

    stamped = _query(app, "counts", QueryableStoreTypes.timestamped_key_value_store())
    assert dict(stamped.all()) == expected.stamped
    assert isinstance(stamped.get("w3"), ValueAndTimestamp)

    windowed = _query(app, "windowed", QueryableStoreTypes.window_store())
    assert {(w.key, w.window.start): n for w, n in windowed.all()} == expected.windowed
    (word, start), count = next(iter(expected.windowed.items()))
    assert windowed.fetch(word, start) == count
    assert dict(windowed.fetch_range(word, 0, BASE_MS * 2)) == {
        s: n for (w, s), n in expected.windowed.items() if w == word}
    stamped_windows = _query(app, "windowed", QueryableStoreTypes.timestamped_window_store())
    assert stamped_windows.fetch(word, start).value == count

    assert dict(_query(app, "users").all()) == expected.users


def _assert_user_mistakes(app: SparkStreams) -> None:
    with pytest.raises(InvalidStateStoreError, match=r"No state store 'count'.*'counts'"):
        _query(app, "count")
    with pytest.raises(InvalidStateStoreError, match="cannot be queried as window_store"):
        _query(app, "counts", QueryableStoreTypes.window_store())
    with pytest.raises(InvalidStateStoreError, match=r"logging disabled.*with_logging_enabled"):
        _query(app, "unlogged")
    with pytest.raises(InvalidStateStoreError, match="no partition 2"):
        _query(app, "counts", partition=2)
    with pytest.raises(InvalidStateStoreError, match="cannot be queried as session_store"):
        _query(app, "users", QueryableStoreTypes.session_store())
    with pytest.raises(InvalidStateStoreError, match="global store"):
        _query(app, "users", partition=0)


def _open_and_aborted_transactions(bootstrap: str, changelog: str) -> object:
    """A transaction aborted on the changelog and one left open: neither may show in the copies."""
    producers = []
    for suffix in ("aborted", "open"):
        producer = clients.producer(bootstrap, **{"transactional.id": f"{changelog}-{suffix}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(changelog, (7).to_bytes(8, "big"), f"ghost-{suffix}".encode(),
                         partition=0)
        producer.flush(30)
        producers.append(producer)
    producers[0].abort_transaction(30)
    return producers[1]


def test_queries_read_the_committed_state_of_the_stores(broker, spark, topics, tmp_path, mode_props):
    names = topics(lines=2, users=2)
    rng = random.Random(11)
    users = [(f"u{i}", f"name-{i}") for i in range(12)]
    first, second = _lines(rng, 0, 150), _lines(rng, 150, 150)
    produce_lines(broker.bootstrap_servers, names["users"], users)
    _produce(broker.bootstrap_servers, names["lines"], first)

    app_id = f"rt-iq-{names['lines']}"
    app = SparkStreams(counting(names["lines"], names["users"]), {
        "application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path),
        "commit.interval.ms": 200, "max.offsets.per.trigger": 200, **mode_props}, spark)
    with pytest.raises(InvalidStateStoreError, match="start"):
        _query(app, "counts")
    app.start()
    try:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        expected = Expected(names, users, first)
        assert dict(_query(app, "counts", stale=True).all()) == expected.counts  # a first query restores
        _assert_matches(app, expected)
        _assert_user_mistakes(app)
        before = dict(_query(app, "counts").all())

        _produce(broker.bootstrap_servers, names["lines"], second)
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        assert dict(_query(app, "counts", stale=True).all()) == before
        open_transaction = _open_and_aborted_transactions(broker.bootstrap_servers,
                                                          f"{app_id}-counts-changelog")
        final = Expected(names, users, first + second)
        try:
            _assert_matches(app, final)
        finally:
            open_transaction.abort_transaction(30)
        assert dict(_query(app, "counts").all()) == final.counts  # the end moved: read again
    finally:
        app.stop()

    after_stop = _query(app, "counts")  # the state committed last
    assert dict(after_stop.all()) == final.counts
    app.stop()  # closes the driver's copies
    with pytest.raises(InvalidStateStoreError, match="closed"):
        after_stop.get("w3")


def test_at_least_once_queries_read_the_changelog_as_written(broker, spark, topics, tmp_path, mode_props):
    names = topics(lines=2, counts=2)
    lines = [(f"k{i}", " ".join(random.Random(i).choices(WORDS, k=3))) for i in range(120)]
    produce_lines(broker.bootstrap_servers, names["lines"], lines)
    app = SparkStreams(word_count(names["lines"], names["counts"]), {
        "application.id": f"rt-iq-alos-{names['lines']}", "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "at_least_once", "state.dir": str(tmp_path), "commit.interval.ms": 200,
        **mode_props}, spark)
    with TopologyTestDriver(word_count(names["lines"], names["counts"])) as driver:
        source = driver.create_input_topic(names["lines"], S, S)
        for key, line in lines:
            source.pipe_input(key, line)
        expected = dict(driver.get_key_value_store("counts").all())
    with app:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        counts = _query(app, "counts")
        assert dict(counts.all()) == expected
        assert counts.get("w7") == expected["w7"]
