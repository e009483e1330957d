"""strom.uncaught.exception.handler: the config's values and REPLACE_THREAD's back-off and limit (the
applications that use it: tests/cli/test_run.py's --on-failure tests)."""

from __future__ import annotations

import pytest

from strom.errors import ConfigError
from strom.spark.failure_policy import UNCAUGHT_EXCEPTION_HANDLER, ReplacingHandler, configured_handler
from strom.spark.runtime.spark_streams import StreamThreadExceptionResponse as Response
from strom.streams import StreamsConfig

BASE = {"application.id": "policy", "bootstrap.servers": "127.0.0.1:1"}


def always_replace(error):
    return "replace_thread"


def _config(value) -> StreamsConfig:
    return StreamsConfig({**BASE, UNCAUGHT_EXCEPTION_HANDLER: value})


def test_no_key_means_no_handler():
    assert configured_handler(StreamsConfig(BASE)) is None


@pytest.mark.parametrize(("value", "response"), [("SHUTDOWN_CLIENT", Response.SHUTDOWN_CLIENT),
                                                 ("shutdown_application", Response.SHUTDOWN_APPLICATION),
                                                 (f"{__name__}.always_replace", Response.REPLACE_THREAD)])
def test_names_and_dotted_paths_answer_their_response(value, response):
    assert configured_handler(_config(value))(ValueError("x")) is response


@pytest.mark.parametrize(("value", "message"), [("RESTART", "one of REPLACE_THREAD"),
                                                ("no_such_module_x.handler", "cannot load handler"),
                                                (f"{__name__}.BASE", "is not a function")])
def test_bad_values_say_what_to_give(value, message):
    with pytest.raises(ConfigError, match=message):
        _config(value)


def test_replace_thread_backs_off_then_stops_at_the_limit():
    now, waits = [0.0], []
    handler = ReplacingHandler("policy", clock=lambda: now[0])
    answers = []
    for _ in range(4):
        answers.append(handler(ValueError("boom")))
        waits.append(handler.delay_s)
        now[0] += 10
    assert answers == [Response.REPLACE_THREAD] * 3 + [Response.SHUTDOWN_CLIENT]
    assert waits[:3] == [1.0, 2.0, 4.0]
    now[0] += 600  # the failures left the window: a new one is replaced again, from the first back-off
    assert handler(ValueError("boom")) is Response.REPLACE_THREAD and handler.delay_s == 1.0


def test_replace_thread_is_a_fresh_handler_per_application():
    config = _config("REPLACE_THREAD")
    assert isinstance(configured_handler(config), ReplacingHandler)
    assert configured_handler(config) is not configured_handler(config)


def test_the_log_names_what_a_python_worker_raised(caplog):
    handler = ReplacingHandler("policy")
    worker_failure = RuntimeError("An exception was thrown from the Python worker:\nTraceback (most recent "
                                  "call last):\n  File \"x.py\", line 1\nValueError: boom\n\tat java.Thread")
    with caplog.at_level("WARNING", "strom.spark.failure_policy"):
        handler(worker_failure)
    assert "failed (ValueError: boom); replacing its stream threads in 1 s" in caplog.text
