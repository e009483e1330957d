"""`strom tasks run` end to end: processes the topic, shows status, drains and commits on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from strom.cli.tasks import tasks
from strom.errors import ConfigError
from support.kafka import committed_offsets, create_topic, end_offsets, produce, unique, wait_for
from support.processes import STROM

pytestmark = pytest.mark.broker



def test_tasks_run_processes_and_stops_gracefully_on_ctrl_c(broker, tmp_path) -> None:
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 2)
    n = produce(bootstrap, topic, [(f"k{i % 7}".encode(), str(i).encode()) for i in range(300)])
    out = tmp_path / "out.txt"
    group = unique("cli")
    proc = subprocess.Popen(
        [STROM, "tasks", "run", "cli_processor:record", "--topic", topic, "--subscription", group,
         "--bootstrap-servers", bootstrap, "--concurrency", "4",
         "--property", "decaton.commit.interval.ms=100"],
        cwd=Path(__file__).parent, env={**os.environ, "STROM_TASKS_OUT": str(out)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: out.exists() and len(out.read_text().split()) >= n, 60)
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "tasks/s" in stderr and "stopped" in stderr
    assert sorted(int(x) for x in out.read_text().split()) == list(range(n))
    assert committed_offsets(bootstrap, group, topic, 2) == end_offsets(bootstrap, topic, 2)


def test_tasks_run_rejects_a_bad_processor_spec_and_property() -> None:
    runner = CliRunner()
    result = runner.invoke(tasks, ["run", "no_colon", "--topic", "t", "--subscription", "s"])
    assert isinstance(result.exception, ConfigError) and "module:name" in str(result.exception)
    result = runner.invoke(tasks, ["run", "m:p", "--topic", "t", "--subscription", "s",
                                   "--property", "decaton.partition.concurency=4"])
    assert isinstance(result.exception, ConfigError)
    assert "Did you mean 'decaton.partition.concurrency'" in str(result.exception)
