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
from confluent_kafka import TopicPartition

from strom.kafka import clients

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

KEYS = 10
RECORDS = 1800
KILLS = 2
QUERY = Path(__file__).with_name("eos_query.py")
GUARANTEE = "exactly_once"


def _start(broker, source: str, sink: str, checkpoint: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(QUERY), broker.bootstrap_servers, source, sink, str(checkpoint), GUARANTEE],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _written(broker, topic: str) -> int:
    """Records and transaction markers in ``topic``, committed or not (sum of high watermarks)."""
    consumer = clients.consumer(broker.bootstrap_servers)
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                   for p in (0, 1))
    finally:
        consumer.close()


def _kill_while_writing(process: subprocess.Popen, broker, sink: str, rng: random.Random) -> bool:
    """SIGKILLs the query's process group just after it starts writing to the sink, before Spark
    can commit the batch (the window where a replay would write twice); False if it ended first."""
    before = _written(broker, sink)
    deadline = time.monotonic() + 150
    while _written(broker, sink) == before and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 0.5))
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
        interrupted += _kill_while_writing(_start(broker, source, sink, checkpoint), broker, sink, rng)
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
