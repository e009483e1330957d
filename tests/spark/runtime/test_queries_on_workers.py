"""Interactive queries answered by the stream threads (real-time mode): IQv2 requests routed by the
driver to the Python workers that hold the tasks, against the TopologyTestDriver's stores after the
same input; positions and bounds; key metadata; the IQv1 facade; nothing of the state in the driver."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time

import pytest

from strom.errors import InvalidStateStoreError
from strom.kafka.clients import JAVA_PARTITIONER
from strom.spark.runtime import SparkStreams
from strom.streams import (
    Consumed,
    FailureReason,
    KeyQuery,
    Materialized,
    Position,
    PositionBound,
    QueryableStoreTypes,
    RangeQuery,
    StateQueryRequest,
    StoreQueryParameters,
    StreamsBuilder,
    TopologyTestDriver,
    WindowKeyQuery,
    WindowRangeQuery,
)
from support.kafka import produce
from support.processes import STROM

from .conftest import produce_lines, wait_for
from .test_interactive_queries import BASE_MS, Expected, _lines, _produce, counting
from .wordcount import S, word_count

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def _ask(app: SparkStreams, store: str, query, **options):
    request = StateQueryRequest.in_store(store).with_query(query)
    if "partitions" in options:
        request = request.with_partitions(options["partitions"])
    if "bound" in options:
        request = request.with_position_bound(options["bound"])
    return app.query(request.require_active())


def _merged(result) -> list:
    assert not result.failures(), result.failures()
    return [entry for p in sorted(result.partition_results) for entry in result.partition_results[p].result]


def test_stream_threads_answer_every_query_type_from_their_own_stores(broker, spark, topics, tmp_path):
    names = topics(lines=2, users=2)
    users = [(f"u{i}", f"name-{i}") for i in range(8)]
    lines = _lines(random.Random(5), 0, 120)
    produce_lines(broker.bootstrap_servers, names["users"], users)
    _produce(broker.bootstrap_servers, names["lines"], lines)
    expected = Expected(names, users, lines)
    app_id = f"rt-iq2-{names['lines']}"
    app = SparkStreams(counting(names["lines"], names["users"]), {
        "application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "commit.interval.ms": 200,
        "execution.mode": "realtime", "num.stream.threads": 2, "query.http.port": 0}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        for word in ("w3", "w11", "nope"):
            answers = _ask(app, "counts", KeyQuery.with_key(word))
            found = [r.result for r in answers.partition_results.values() if r.result is not None]
            assert found == ([expected.counts[word]] if word in expected.counts else [])
        assert dict(_merged(_ask(app, "counts", RangeQuery.with_no_bounds()))) == expected.counts
        in_range = dict(_merged(_ask(app, "counts", RangeQuery.with_range("w1", "w13"))))
        assert in_range == {k: v for k, v in expected.counts.items() if "w1" <= k <= "w13"}
        assert {(w.key, w.window.start): n for w, n in _merged(_ask(
            app, "windowed", WindowRangeQuery.with_window_start_range(0, BASE_MS * 2)))} == expected.windowed
        (word, start), count = next(iter(expected.windowed.items()))
        assert _merged(_ask(app, "windowed", WindowKeyQuery.with_key_and_window_start_range(
            word, start, start))) == [(start, count)]
        unlogged = dict(_merged(_ask(app, "unlogged", RangeQuery.with_no_bounds())))
        assert unlogged == expected.counts  # a store without changelog is served too: it lives in the tasks
        users_result = app.query(StateQueryRequest.in_store("users").with_query(KeyQuery.with_key("u3")))
        assert users_result.global_result.result == "name-3"

        # which partition holds a key, and the endpoints serving the store
        for key in expected.counts:
            metadata = app.query_metadata_for_key("counts", key)
            assert metadata.active_host.port > 0
            only = _ask(app, "counts", KeyQuery.with_key(key), partitions=[metadata.partition])
            assert only.get_only_partition_result().result == expected.counts[key]
        endpoints = app.streams_metadata_for_store("counts")
        assert sorted(p for e in endpoints for p in e.active_partitions) == [0, 1]

        # positions: what an answer includes, and a bound the stores have not reached
        result = _ask(app, "counts", RangeQuery.with_no_bounds())
        position = result.get_position()
        repartition = f"{app_id}-words-repartition"
        assert position.topics == {repartition}
        assert _ask(app, "counts", KeyQuery.with_key("w3"), bound=PositionBound.at(position)).failures() == {}
        ahead = position.with_component(repartition, 0, position.get_partition_positions(repartition)[0] + 10)
        answers = _ask(app, "counts", KeyQuery.with_key("w3"), bound=PositionBound.at(ahead))
        answers = answers.partition_results
        assert answers[0].failure_reason is FailureReason.NOT_UP_TO_BOUND and answers[1].is_success()

        # the IQv1 facade on top
        counts = app.store(StoreQueryParameters.from_name("counts", QueryableStoreTypes.key_value_store()))
        assert dict(counts.all()) == expected.counts and counts.get("w3") == expected.counts.get("w3")
        stamped = app.store(StoreQueryParameters.from_name(
            "counts", QueryableStoreTypes.timestamped_key_value_store()))
        assert dict(stamped.all()) == expected.stamped
        windowed = app.store(StoreQueryParameters.from_name("windowed", QueryableStoreTypes.window_store()))
        assert windowed.fetch(word, start) == count
        with pytest.raises(InvalidStateStoreError, match=r"No state store 'count'.*'counts'"):
            app.query(StateQueryRequest.in_store("count").with_query(KeyQuery.with_key("w3")))
        with pytest.raises(InvalidStateStoreError, match="no partition 2"):
            _ask(app, "counts", KeyQuery.with_key("w3"), partitions=[2])
        assert not (tmp_path / app_id / "query").exists()  # no copy of any store in the driver
        _assert_http_and_cli(app, app_id, tmp_path, expected)
    finally:
        app.stop()
    with pytest.raises(InvalidStateStoreError, match="closed"):
        counts.get("w3")
    assert Position.empty().is_empty()


def _curl(url: str) -> tuple[int, dict]:
    done = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", url], capture_output=True, text=True,
                          timeout=30, check=True)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), json.loads(body)


def _assert_http_and_cli(app: SparkStreams, app_id: str, state_dir, expected: Expected) -> None:
    """The driver's HTTP face through curl, and `strom streams query` in a fresh interpreter."""
    base = app.query_url
    status, body = _curl(f"{base}/stores/counts/keys/w3")
    assert status == 200 and body["value"] == expected.counts["w3"], body
    assert body["partition"] == app.query_metadata_for_key("counts", "w3").partition
    assert list(body["position"]) == [f"{app_id}-words-repartition"]
    assert _curl(f"{base}/stores/counts/keys/nope")[0] == 404
    status, body = _curl(f"{base}/stores/counts/range?from=w1&to=w13")
    assert status == 200 and dict(body["entries"]) == {
        k: v for k, v in expected.counts.items() if "w1" <= k <= "w13"}
    (word, start), count = next(iter(expected.windowed.items()))
    status, body = _curl(f"{base}/stores/windowed/keys/{word}/windows?from={start}&to={start}")
    assert status == 200 and body["entries"] == [[start, count]]
    status, body = _curl(f"{base}/stores/windowed/windows?from=0&to={BASE_MS * 2}")
    assert {(e[0]["key"], e[0]["start"]): e[1] for e in body["entries"]} == expected.windowed
    assert _curl(f"{base}/stores/users/keys/u3")[1]["value"] == "name-3"
    status, body = _curl(f"{base}/stores/nope/keys/a")
    assert status == 404 and "No state store 'nope'" in body["error"]
    status, body = _curl(f"{base}/stores/counts/windows?from=0&to=10")
    assert status == 400 and body["reason"] == "UNKNOWN_QUERY_TYPE"
    status, body = _curl(f"{base}/stores/counts/metadata")
    assert status == 200 and body["endpoints"] == [
        {"host": m.host_info.host, "port": m.host_info.port, "active": sorted(m.active_partitions),
         "standby": sorted(m.standby_partitions)} for m in app.streams_metadata_for_store("counts")]
    assert sorted(p for endpoint in body["endpoints"] for p in endpoint["active"]) == [0, 1]

    def strom_query(key: str) -> subprocess.CompletedProcess:
        command = [STROM, "streams", "query", app_id, "counts", key,
                   "--state-dir", str(state_dir)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    done = strom_query("w3")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["value"] == expected.counts["w3"]
    missing = strom_query("nope")
    assert missing.returncode == 1 and json.loads(missing.stdout)["value"] is None



def test_a_killed_python_worker_costs_retriable_answers_never_wrong_ones(broker, spark, topics, tmp_path):
    """Queries keep coming while a worker holding tasks is SIGKILLed: each partition answers the
    committed count or a retriable NOT_PRESENT (its task is moving), and all answer again once the
    tasks run elsewhere."""
    names = topics(lines=2, counts=2)
    vocabulary = [f"w{n}" for n in range(12)]
    lines = [(f"k{i}", " ".join(random.Random(i).choices(vocabulary, k=3))) for i in range(150)]
    produce_lines(broker.bootstrap_servers, names["lines"], lines)
    with TopologyTestDriver(word_count(names["lines"], names["counts"])) as driver:
        source = driver.create_input_topic(names["lines"], S, S)
        for key, line in lines:
            source.pipe_input(key, line)
        expected = dict(driver.get_key_value_store("counts").all())
    app = SparkStreams(word_count(names["lines"], names["counts"]), {
        "application.id": f"rt-iq2-kill-{names['lines']}", "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "commit.interval.ms": 200,
        "execution.mode": "realtime", "num.stream.threads": 2}, spark)
    app.start()
    answers: list[tuple[str, int, object]] = []
    stop = threading.Event()

    def ask() -> None:
        while not stop.is_set():
            for word in expected:
                partition = app.query_metadata_for_key("counts", word).partition
                result = app.query(StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(word))
                                   .require_active())
                answers.append((word, partition, result.partition_results[partition]))
                if result.partition_results[partition].is_failure():
                    time.sleep(0.05)  # a client retrying a retriable failure

    try:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        assert wait_for(lambda: len(answers) > 2 * len(expected), 60)
        victim = next(t for t in app.metadata_for_local_threads() if t.active_tasks)
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = len(answers)
        assert app.wait_until_caught_up(240), f"lag {app.lag()}"
        assert wait_for(lambda: all(r.is_success() for _, _, r in answers[-len(expected):])
                        and len(answers) > killed_at + 2 * len(expected), 120), answers[-len(expected):]
    finally:
        stop.set()
        app.stop()
    wrong = [(w, r) for w, _, r in answers if r.is_success() and r.result != expected[w]]
    assert not wrong, wrong[:5]
    failed = [r for _, _, r in answers if r.is_failure()]
    assert all(r.failure_reason is FailureReason.NOT_PRESENT and "retry" in r.failure_message for r in failed)
    print(f"{len(answers)} key queries, {len(failed)} retriable failures while the tasks moved")


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) / 1024


def test_a_million_key_store_is_queried_where_it_lives_and_the_driver_does_not_grow(broker, spark, topics,
                                                                                   tmp_path):
    """The issue's scale: 1,000,000 keys counted by the stream threads. The first query answers at once (no
    copy to restore first), and the driver's memory and disk do not grow with the store while it is asked
    (bench/queries.py measures the latencies)."""
    keys = 1_000_000
    names = topics(lines=2)
    produce(broker.bootstrap_servers, names["lines"], ((f"key-{i}", "x") for i in range(keys)),
            **JAVA_PARTITIONER, **{"linger.ms": 50})
    builder = StreamsBuilder()
    counted = builder.stream(names["lines"], Consumed.with_(S, S)).group_by_key()
    counted.count(materialized=Materialized.as_("counts"))
    app_id = f"rt-iq2-million-{names['lines']}"
    app = SparkStreams(builder.build(), {
        "application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "execution.mode": "realtime",
        "num.stream.threads": 2}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(900), f"lag {app.lag()}"
        before = _rss_mb()
        started = time.monotonic()
        first = _ask(app, "counts", KeyQuery.with_key(f"key-{keys // 2}"))
        first_s = time.monotonic() - started
        assert [r.result for r in first.partition_results.values() if r.result is not None] == [1]
        rng = random.Random(3)
        for key in (f"key-{rng.randrange(keys)}" for _ in range(2000)):
            partition = app.query_metadata_for_key("counts", key).partition
            answer = _ask(app, "counts", KeyQuery.with_key(key), partitions=[partition])
            assert answer.get_only_partition_result().result == 1, key
        grown = _rss_mb() - before
    finally:
        app.stop()
    assert first_s < 2.0, f"the first query took {first_s:.2f} s"
    assert grown < 50, f"the driver grew {grown:.0f} MB while asked 2,001 keys of a 1,000,000-key store"
    assert not (tmp_path / app_id / "query").exists()  # no copy of the store in the driver
    print(f"first query {first_s * 1000:.0f} ms; driver RSS {grown:+.0f} MB")
