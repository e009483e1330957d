"""SparkStreams' lifecycle as KafkaStreams': states and their listener, a failing record on Spark ending
in ERROR with the record's error, clean_up refused while running and deleting the local state after, and
an uncaught exception handler that replaces the failed query."""

from __future__ import annotations

import os

import pytest

from strom.errors import ConfigError, ProcessingError
from strom.spark.runtime import SparkStreams, StreamThreadExceptionResponse
from strom.streams import Consumed, Materialized, Produced, StreamsBuilder

from .conftest import produce_lines, read_updates
from .task_batches import counts
from .wordcount import L, S

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

State = SparkStreams.State


def test_a_failing_record_puts_the_application_in_error_and_clean_up_waits_for_stop(
        broker, spark, topics, tmp_path, mode_props):
    names = topics(source=1, sink=1)
    produce_lines(broker.bootstrap_servers, names["source"], [("a", "x"), ("b", "boom"), ("a", "x")])
    app_id = f"rt-lifecycle-{names['source']}"
    app = SparkStreams(counts(names["source"], names["sink"], fail_on="boom"), {
        "application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "commit.interval.ms": 200,
        **mode_props}, spark)
    changes: list[tuple[State, State]] = []
    app.set_state_listener(lambda new, old: changes.append((old, new)))
    assert app.state is State.CREATED
    app.start()
    try:
        assert app.state in (State.RUNNING, State.ERROR)
        with pytest.raises(ConfigError, match="call stop\\(\\) first"):
            app.clean_up()
        with pytest.raises(ProcessingError, match="bad record boom"):
            app.await_termination(120)
        assert app.state is State.ERROR
    finally:
        app.stop()
    assert app.state is State.NOT_RUNNING
    assert changes == [(State.CREATED, State.RUNNING), (State.RUNNING, State.ERROR),
                       (State.ERROR, State.PENDING_SHUTDOWN), (State.PENDING_SHUTDOWN, State.NOT_RUNNING)]
    assert (tmp_path / app_id).is_dir()
    app.clean_up()
    assert not (tmp_path / app_id).exists()


def failing_once(source: str, sink: str, marker: str):
    """Counts per key; the first time it meets 'flaky' (no marker file yet) it fails."""

    def check(key, value):
        if value == "flaky" and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("a transient failure")
        return value

    builder = StreamsBuilder()
    (builder.stream(source, Consumed.with_(S, S)).map_values(check).group_by_key()
        .count(materialized=Materialized.as_("counts")).to_stream().to(sink, Produced.with_(S, L)))
    return builder.build()


def test_replace_thread_restarts_the_query_from_the_committed_offsets(broker, spark, topics, tmp_path,
                                                                     mode_props):
    names = topics(source=1, sink=1)
    produce_lines(broker.bootstrap_servers, names["source"], [("a", "x"), ("b", "flaky"), ("a", "x")])
    app = SparkStreams(failing_once(names["source"], names["sink"], str(tmp_path / "failed-once")), {
        "application.id": f"rt-replace-{names['source']}", "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "commit.interval.ms": 200,
        **mode_props}, spark)
    seen: list[Exception] = []

    def handler(error: Exception) -> StreamThreadExceptionResponse:
        seen.append(error)
        return StreamThreadExceptionResponse.REPLACE_THREAD

    app.set_uncaught_exception_handler(handler)
    app.start()
    try:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        assert app.state is State.RUNNING
    finally:
        app.stop()
    assert len(seen) == 1 and "a transient failure" in str(seen[0])
    assert read_updates(broker.bootstrap_servers, names["sink"]) in (
        {"a": [2], "b": [1]}, {"a": [1, 2], "b": [1]})  # the failed batch left nothing behind
