"""Start-up phase marks (strom.spark.startup): what bench/startup.py and a user read to see where a
start-up's time goes, in the driver and in Spark's Python workers."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from strom.spark.startup import WORKER_LOG_LEVEL_VARIABLE, mark, process_age_s


def test_a_mark_says_the_phase_the_wall_clock_time_and_the_process(caplog):
    caplog.set_level(logging.DEBUG, logger="strom.startup")
    before = time.time()
    mark("tasks-open", "thread 1")
    [record] = [r for r in caplog.records if r.name == "strom.startup"]
    phase, _, at, _, pid, detail = record.getMessage().split(" ", 6)[1:]
    assert phase == "tasks-open" and detail == "thread 1" and int(pid) == os.getpid()
    assert before - 0.001 <= float(at) <= time.time()  # to the millisecond


def test_no_mark_is_formatted_unless_debug_is_on(caplog):
    caplog.set_level(logging.INFO, logger="strom.startup")
    mark("planned")
    assert not [r for r in caplog.records if r.name == "strom.startup"]


def test_a_new_process_is_young_and_this_one_older():
    script = "from strom.spark.startup import process_age_s; print(process_age_s())"
    age = float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               check=True, timeout=120).stdout)
    mine = process_age_s()
    assert mine is not None and 0 <= age < mine + 120


def test_a_worker_daemon_logs_marks_with_the_variable_set_and_stays_quiet_without():
    script = ("from strom.spark.startup import configure_worker_logging, mark\n"
              "configure_worker_logging()\n"
              "mark('thread-started', 'thread 0')\n")
    env = {**os.environ, WORKER_LOG_LEVEL_VARIABLE: "debug"}
    loud = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          check=True, timeout=120)
    assert "strom.startup: phase thread-started at " in loud.stderr
    env.pop(WORKER_LOG_LEVEL_VARIABLE)
    quiet = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                           check=True, timeout=120)
    assert quiet.stderr == ""
