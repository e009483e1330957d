"""kill -9 at random points and restart: every task is processed at least once, none is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.kafka import committed_offsets, create_topic, end_offsets, produce, unique, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]

WORKER = Path(__file__).with_name("tasks_worker.py")


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _start(bootstrap: str, topic: str, group: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), bootstrap, topic, group, str(out)])


def test_kill_9_at_random_points_then_restart_loses_nothing(broker, tmp_path) -> None:
    bootstrap = broker.bootstrap_servers
    topic = create_topic(bootstrap, 3)
    n = produce(bootstrap, topic, [(f"k{i % 50}".encode(), str(i).encode()) for i in range(3000)])
    group = unique("kill")
    out = tmp_path / "processed.txt"
    rng = random.Random(int(os.environ.get("STROM_TEST_SEED", "11")))
    kills = 0
    for _ in range(2):
        worker = _start(bootstrap, topic, group, out)
        before = len(_lines(out))
        assert wait_for(lambda b=before: len(_lines(out)) > b + 50, 60), "worker made no progress"
        time.sleep(rng.uniform(0.1, 1.0))
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        kills += 1
    assert len(set(_lines(out))) < n, "the kills happened before all tasks were processed"
    worker = _start(bootstrap, topic, group, out)
    try:
        assert wait_for(lambda: len(set(_lines(out))) >= n, 90, 0.1)
        ends = end_offsets(bootstrap, topic, 3)
        assert wait_for(lambda: committed_offsets(bootstrap, group, topic, 3) == ends, 30, 0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    processed = _lines(out)
    assert set(processed) == {str(i) for i in range(n)}
    assert kills == 2
