"""A streaming aggregation keeps exactly-once output across SIGKILLs and checkpoint restarts.

The query (eos_query.py) runs in its own process group; the test kills the whole group (Python
driver, JVM, Python workers) at random points while batches are being written, restarts it from
its checkpoint, and finally lets it finish. Read with read_committed, every key's counts must rise
strictly (a replayed batch written twice would repeat a count) and end at the true total.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

KEYS = 10
RECORDS = 2400
KILLS = 2
QUERY = Path(__file__).with_name("eos_query.py")


def _commits(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def _start(broker, source: str, sink: str, checkpoint: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(QUERY), broker.bootstrap_servers, source, sink, str(checkpoint)],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _kill_while_writing(process: subprocess.Popen, checkpoint: Path, rng: random.Random) -> bool:
    """Waits for a new committed batch, then SIGKILLs the group mid-stream; False if it ended first."""
    before = _commits(checkpoint)
    deadline = time.monotonic() + 120
    while _commits(checkpoint) == before and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(rng.uniform(0.0, 1.5))
    alive = process.poll() is None
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
    return alive


def test_exactly_once_output_survives_sigkill_and_restart(broker, new_topic, produce, consume_all, tmp_path):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    source, sink = new_topic(partitions=2), new_topic(partitions=2)
    produce(broker.bootstrap_servers, source,
            [(f"k{i % KEYS}".encode(), f"{i}".encode()) for i in range(RECORDS)])
    checkpoint = tmp_path / "checkpoint"

    interrupted = 0
    for _ in range(KILLS):
        interrupted += _kill_while_writing(_start(broker, source, sink, checkpoint), checkpoint, rng)
    final = _start(broker, source, sink, checkpoint)
    _, stderr = final.communicate(timeout=200)
    assert final.returncode == 0, stderr.decode()[-3000:]
    assert interrupted == KILLS, f"the query finished before it could be killed (seed {seed})"

    counts = defaultdict(list)
    for message in consume_all(broker.bootstrap_servers, sink):
        counts[message.key()].append(int(message.value()))
    assert sorted(counts) == sorted(f"k{k}".encode() for k in range(KEYS)), seed
    for key, emitted in counts.items():
        assert emitted == sorted(set(emitted)), f"{key!r}: duplicate or reordered {emitted} (seed {seed})"
        assert emitted[-1] == RECORDS // KEYS, (key, emitted, seed)
