"""Exactly-once holds when the Spark driver process is SIGKILLed mid-run and started again.

The app (wordcount.py, in either execution mode: micro-batches of what has arrived, or stream threads
committing every 100 ms in 2 s batches) runs in its own process group while lines keep arriving;
once its first offsets are committed the whole group (Python driver, JVM, Python workers) is killed
at a random moment, then a new process resumes from the committed offsets. Read read_committed,
every word's updates must rise strictly (a transaction committed twice would repeat a count) and end
at the exact count: open transactions of the killed run were fenced and aborted.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from strom.kafka import clients

from .conftest import produce_lines, produce_steadily, read_updates

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

APP = Path(__file__).with_name("wordcount.py")


# micro-batches take what has arrived (no cap of 120 per trigger): the kill still lands while lines arrive,
# and the restarted run catches up in a few batches, not one per 120 records
OVERRIDES = {"realtime": "{}", "microbatch": json.dumps({"max.offsets.per.trigger": None})}


def _start(broker, names: dict[str, str], state_dir: Path, app_id: str, mode: str,
           input_done: Path) -> subprocess.Popen:
    """The app runs until ``input_done`` exists and every input record is committed."""
    return subprocess.Popen(
        [sys.executable, str(APP), broker.bootstrap_servers, names["lines"], names["counts"],
         str(state_dir), app_id, mode, str(input_done), OVERRIDES[mode]],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        cwd=Path(__file__).parents[3])


def _committed(bootstrap: str, app_id: str, topic: str) -> int:
    consumer = clients.consumer(bootstrap, group_id=app_id)
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(2)], 10)
    finally:
        consumer.close()
    return sum(max(0, tp.offset) for tp in offsets)


@pytest.mark.parametrize("mode", ["realtime", "microbatch"])
def test_exactly_once_when_driver_is_killed_and_restarted(broker, topics, tmp_path, mode):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    names = topics(lines=2, counts=2)
    words = [f"w{i}" for i in range(12)]
    lines = [(f"k{i}", " ".join(rng.choices(words, k=rng.randint(1, 5)))) for i in range(600)]
    produce_lines(broker.bootstrap_servers, names["lines"], lines[:100])
    app_id = f"rt-kill-{names['lines']}"
    input_done = tmp_path / "input-done"

    first = _start(broker, names, tmp_path, app_id, mode, input_done)
    deadline = time.monotonic() + 200
    while (_committed(broker.bootstrap_servers, app_id, names["lines"]) == 0
           and first.poll() is None and time.monotonic() < deadline):
        time.sleep(0.2)
    writer = threading.Thread(target=produce_steadily, args=(broker.bootstrap_servers, names["lines"],
                                                                lines[100:], 4.0))
    writer.start()  # lines keep arriving: the kill lands among open transactions
    time.sleep(rng.uniform(0.5, 3.0))
    assert first.poll() is None, f"the app ended before it was killed: {first.stderr.read().decode()[-2000:]}"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(30)
    writer.join()
    expected = Counter(w for _, line in lines for w in line.split())
    before = read_updates(broker.bootstrap_servers, names["counts"])
    assert {k: v[-1] for k, v in before.items()} != dict(expected), f"killed after the end (seed {seed})"

    input_done.touch()
    second = _start(broker, names, tmp_path, app_id, mode, input_done)
    _, stderr = second.communicate(timeout=240)
    assert second.returncode == 0, stderr.decode()[-3000:]

    updates = read_updates(broker.bootstrap_servers, names["counts"])
    assert {k: v[-1] for k, v in updates.items()} == dict(expected), seed
    for key, seen in updates.items():
        assert seen == sorted(set(seen)), f"{key}: duplicate or reordered updates {seen} (seed {seed})"

