"""SparkStreams' lifecycle as KafkaStreams': states and their listener, a failing record on Spark ending
in ERROR with the record's error, clean_up refused while running and deleting the local state after."""

from __future__ import annotations

import pytest

from strom.errors import ConfigError, ProcessingError
from strom.spark.runtime import SparkStreams

from .conftest import produce_lines
from .task_batches import counts

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

State = SparkStreams.State


def test_a_failing_record_puts_the_application_in_error_and_clean_up_waits_for_stop(
        broker, spark, topics, tmp_path):
    names = topics(source=1, sink=1)
    produce_lines(broker.bootstrap_servers, names["source"], [("a", "x"), ("b", "boom"), ("a", "x")])
    app_id = f"rt-lifecycle-{names['source']}"
    app = SparkStreams(counts(names["source"], names["sink"], fail_on="boom"), {
        "application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
        "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path), "commit.interval.ms": 200},
        spark)
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
