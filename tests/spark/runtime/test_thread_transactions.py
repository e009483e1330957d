"""exactly_once_v2 in real-time mode is one transaction per stream thread (issue 38), on local Spark and
the strom broker: as many transactional ids as threads, however many tasks; a task raising inside a
thread takes every task of that thread back to its last commit; a Spark task retried after its first
attempt's worker died mid-transaction fences that attempt (docs/runtime.md, "What fences what").
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from strom.kafka import clients
from strom.spark.runtime import SparkStreams, StreamThreadExceptionResponse
from strom.spark.runtime.thread import IN_FLIGHT, transactional_id
from strom.spark.startup import WORKER_LOG_LEVEL_VARIABLE
from strom.streams import Consumed, Materialized, Produced, StreamsBuilder
from support.processes import STROM

from .cluster_wordcount import assert_counted_once, caught_up
from .conftest import produce_lines, read_updates, wait_for
from .wordcount import L, S, word_count

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(600)]


def _props(broker, tmp_path, app_id: str, **extra) -> dict:
    return {"application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
            "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path),
            "execution.mode": "realtime", "commit.interval.ms": 100, **extra}


def _lines(seed: int, count: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    return [(f"k{i}", " ".join(rng.choices(words, k=rng.randint(1, 4)))) for i in range(count)]


def _caught_up(bootstrap: str, app_id: str, partitions: list[tuple[str, int]]) -> bool:
    try:
        return caught_up(bootstrap, app_id, partitions)
    except KafkaException:  # NOT_LEADER_FOR_PARTITION: a node does not know a new topic's leaders yet
        return False


def _transactions(bootstrap: str) -> dict[str, str]:
    """transactional.id -> state, as `strom transactions list` shows the broker's coordinator."""
    listed = subprocess.run([STROM, "transactions", "list", "-b", bootstrap, "--output", "json"],
                            check=True, capture_output=True, timeout=60).stdout
    return {row["transactional.id"]: row["state"] for row in json.loads(listed)}


def test_thirty_two_partitions_on_two_threads_are_two_transactional_ids(any_broker, spark, tmp_path):
    """On strom broker and on the 3-node Apache Kafka cluster, whose coordinators list them."""
    broker = any_broker
    names = {alias: f"eos-ids-{alias}-{uuid.uuid4().hex[:8]}" for alias in ("lines", "counts")}
    clients.create_topics(broker.bootstrap_servers, {names["lines"]: 32, names["counts"]: 4})
    lines = _lines(38, 2000)
    produce_lines(broker.bootstrap_servers, names["lines"], lines)
    app_id = f"eos-ids-{names['lines']}"
    app = SparkStreams(word_count(names["lines"], names["counts"]),
                       _props(broker, tmp_path, app_id, **{"num.stream.threads": 2}), spark)
    app.start()
    try:
        topics = (names["lines"], f"{app_id}-words-repartition")
        partitions = [(topic, p) for topic in topics for p in range(32)]
        assert wait_for(lambda: _caught_up(broker.bootstrap_servers, app_id, partitions), 480), "behind"
        assert len(app.plan.task_ids) == 64 and app.num_stream_threads == 2  # 32 + 32 repartition tasks
        states = {tid: state for tid, state in _transactions(broker.bootstrap_servers).items()
                  if tid.startswith(f"{app_id}-")}
    finally:
        app.stop()
    # the two threads' ids committed for all 64 tasks; and the first start, with no record of earlier
    # runs' slots, fenced only the slots a run of this configuration can have (2 threads, local[2]),
    # not one per task: no other id of the application exists
    threads = {transactional_id(app_id, slot) for slot in range(2)}
    assert set(states) == threads, states
    assert all(state != "Empty" for state in states.values()), states
    assert sum(p.commits for p in app.progress.tasks.values()) > 0
    assert_counted_once(broker.bootstrap_servers, names["counts"], lines)
    assert (tmp_path / app_id / "stream-thread-slots").read_text() == "2"  # a restart fences only these


def failing_once_on(partition_word: str, source: str, sink: str, marker: str,
                    error: Callable[[], Exception] = lambda: RuntimeError("a transient failure")):
    """Counts per key; the first time it meets ``partition_word`` (no marker file yet) it raises
    ``error()``."""

    def check(key, value):
        if value == partition_word and not os.path.exists(marker):
            open(marker, "w").close()
            raise error()
        return value

    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_(S, S)).map_values(check).group_by_key()
        .count(materialized=Materialized.as_("counts")).to_stream().to(sink, Produced.with_(S, L)))
    return builder.build()


WIDE_SINK = IN_FLIGHT - 1
"""Output partitions of the tests whose thread must send its caches early: with the two tasks' changelog
partitions its transactions write to more partitions than librdkafka has produce requests in flight, so
what the thread processed before the record that raises went out in the transaction that is aborted."""

FLAKY_RECORDS = [(f"key{i % 20}", "x") for i in range(400)] + [("flaky-key", "flaky")]
"""Counted per key by ``failing_once_on("flaky", ...)``; the last one raises."""


def _run_past_the_flaky_record(broker, source: str, app: SparkStreams) -> None:
    """The first 100 records committed; the rest processed by both tasks in one commit interval (5 s),
    then the record that raises; all committed."""
    assert app.wait_until_caught_up(150), f"lag {app.lag()}"
    produce_lines(broker.bootstrap_servers, source, FLAKY_RECORDS[100:-1])
    time.sleep(0.5)
    produce_lines(broker.bootstrap_servers, source, FLAKY_RECORDS[-1:])
    assert app.wait_until_caught_up(150), f"lag {app.lag()}"


def _assert_counted_exactly(broker, sink: str) -> None:
    """Every key's last count is its number of records; no update written twice."""
    updates = read_updates(broker.bootstrap_servers, sink)
    assert {k: v[-1] for k, v in updates.items()} == dict(Counter(key for key, _ in FLAKY_RECORDS))
    for key, counts in updates.items():
        assert counts == sorted(set(counts)), f"{key}: an update was written twice: {counts}"


def test_a_task_raising_takes_every_task_of_its_thread_back_to_its_last_commit(broker, spark, topics,
                                                                               tmp_path):
    """One thread runs both tasks; the record that raises comes after records of both partitions were
    processed in the same commit interval: the thread's one transaction is aborted, both
    tasks' stores drop what they counted since the last commit, and after REPLACE_THREAD every count is
    exact, no update written twice."""
    names = topics(source=2, sink=WIDE_SINK)
    produce_lines(broker.bootstrap_servers, names["source"], FLAKY_RECORDS[:100])
    app = SparkStreams(failing_once_on("flaky", names["source"], names["sink"], str(tmp_path / "failed")),
                       _props(broker, tmp_path, f"eos-raise-{names['source']}",
                              **{"num.stream.threads": 1, "commit.interval.ms": 5000}), spark)
    seen: list[Exception] = []

    def replace(error: Exception) -> StreamThreadExceptionResponse:
        seen.append(error)
        return StreamThreadExceptionResponse.REPLACE_THREAD

    app.set_uncaught_exception_handler(replace)
    app.start()
    try:
        _run_past_the_flaky_record(broker, names["source"], app)
    finally:
        app.stop()
    assert len(seen) == 1 and "a transient failure" in str(seen[0])
    _assert_counted_exactly(broker, names["sink"])


def test_an_aborted_transaction_reopens_the_threads_tasks_in_place(broker, spark, topics, tmp_path):
    """Issue 38: a transaction that can only be aborted (here a record's delivery timed out, raised by the
    processor once) takes every task of the thread back to its last commit, and the thread opens them
    again itself, the driver allowing it: no failure, no batch ended early, every count exact, no update
    written twice."""
    def delivery_timed_out() -> Exception:  # what a task raises when a record's delivery ran out of time
        from confluent_kafka import KafkaError, KafkaException  # imported in the executor: cimpl's classes

        error = RuntimeError("Task failed to send a record")
        error.__cause__ = KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))
        return error

    names = topics(source=2, sink=WIDE_SINK)
    produce_lines(broker.bootstrap_servers, names["source"], FLAKY_RECORDS[:100])
    app = SparkStreams(failing_once_on("flaky", names["source"], names["sink"], str(tmp_path / "failed"),
                                       delivery_timed_out),
                       _props(broker, tmp_path, f"eos-revive-{names['source']}",
                              **{"num.stream.threads": 1, "commit.interval.ms": 5000}), spark)
    seen: list[Exception] = []
    app.set_uncaught_exception_handler(
        lambda error: seen.append(error) or StreamThreadExceptionResponse.SHUTDOWN_CLIENT)
    app.start()
    try:
        _run_past_the_flaky_record(broker, names["source"], app)
        assert (tmp_path / "failed").exists()
        assert app.state is SparkStreams.State.RUNNING and not seen, seen
        assert app.progress.batches == 0  # the batch goes on: no early end, no new batch
    finally:
        app.stop()
    _assert_counted_exactly(broker, names["sink"])


def _thread_attempts(worker_log: str) -> dict[int, set[str]]:
    """Per Python worker (pid) that ran a thread of batch 1: the phases it marked (``strom.spark.startup``:
    "thread-started" before ``init_transactions``, "assigned" after it and the driver's answer)."""
    started = set(re.findall(r"phase thread-started at \S+ pid (\d+) thread 0 batch 1 ", worker_log))
    phases: dict[int, set[str]] = {int(pid): {"thread-started"} for pid in started}
    for pid in re.findall(r"phase assigned at \S+ pid (\d+) thread 0 ", worker_log):
        if int(pid) in phases:
            phases[int(pid)].add("assigned")
    return phases


def test_a_spark_task_retried_after_its_worker_died_fences_the_first_attempt(broker, topics, tmp_path):
    """A real Spark task retry (``local[2,2]``, in a process of its own): the stream thread's Python worker
    exits mid-transaction, outside strom's handlers, after counts of that transaction reached the broker.
    Spark runs the thread's task again in another worker; its ``init_transactions`` on the slot's id fences
    the dead attempt's producer and aborts its open transaction before it says hello (the driver, which saw
    the thread's connection end, then ends the batch: the next batch reopens the tasks). Every count is
    exact read_committed, no update written twice: the dead attempt's counts are never visible."""
    names = topics(source=2, sink=1)
    records = [*FLAKY_RECORDS[:-1], ("crash-key", "crash"), *FLAKY_RECORDS[:20]]
    produce_lines(broker.bootstrap_servers, names["source"], records)
    crashed = tmp_path / "crashed"
    script = Path(__file__).with_name("retried_thread.py")
    started = time.monotonic()
    run = subprocess.run([sys.executable, str(script), broker.bootstrap_servers, names["source"],
                          names["sink"], str(tmp_path / "state"), str(crashed)],
                         capture_output=True, text=True, timeout=400,
                         env={**os.environ, WORKER_LOG_LEVEL_VARIABLE: "DEBUG"})
    took = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-3000:]
    assert crashed.exists(), "the worker never died"
    attempts = _thread_attempts(run.stderr)
    assert len(attempts) == 2, f"batch 1's thread ran in {attempts}: no retry of its Spark task"
    assert all("assigned" in phases for phases in attempts.values()), attempts  # the retry fenced, said hello
    updates = read_updates(broker.bootstrap_servers, names["sink"], timeout=30)
    expected = Counter(key for key, _ in records)
    assert {k: v[-1] for k, v in updates.items()} == dict(expected)
    for key, counts in updates.items():
        assert counts == list(range(1, expected[key] + 1)), f"{key}: {counts}"
    print(f"retried attempt: the application caught up {took:.1f} s after its start")
