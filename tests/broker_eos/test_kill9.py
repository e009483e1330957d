"""Exactly-once under fire: a read-process-write loop killed with kill -9 at random points and
restarted many times, with the broker itself crashed mid-transaction; read_committed output must
hold exactly one result per input record."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from strom.broker import EmbeddedBroker
from strom.kafka import clients

pytestmark = [pytest.mark.broker, pytest.mark.slow]

RECORDS = 1500
PARTITIONS = 2
KILLS = 8
BROKER_CRASH_AT = 4
WORKER = Path(__file__).with_name("rpw_worker.py")


def _start_worker(bootstrap: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), bootstrap, "in", "out", "rpw-group", "rpw-app",
                             str(PARTITIONS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _committed_inputs(bootstrap: str) -> int:
    consumer = clients.consumer(bootstrap, "rpw-group")
    committed = consumer.committed([TopicPartition("in", p) for p in range(PARTITIONS)], 30)
    consumer.close()
    return sum(max(tp.offset, 0) for tp in committed)


def _read_committed(bootstrap: str) -> list[bytes]:
    consumer = clients.consumer(bootstrap, "rpw-verifier", **{"isolation.level": "read_committed"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition("out", p), 10)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition("out", p, 0) for p in range(PARTITIONS)])
    values, positions = [], dict.fromkeys(ends, 0)
    deadline = time.monotonic() + 30
    while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for message in consumer.consume(500, 0.5):
            if message.error() is None:
                values.append(message.value())
                positions[message.partition()] = message.offset() + 1
        for tp in consumer.position([TopicPartition("out", p) for p in ends]):
            positions[tp.partition] = max(positions[tp.partition], tp.offset)
    consumer.close()
    return values


def test_read_process_write_is_exactly_once_across_kill_9_and_broker_crash(tmp_path: Path) -> None:
    rng = random.Random(4)
    with EmbeddedBroker(tmp_path / "broker") as broker:
        bootstrap = broker.bootstrap_servers
        clients.create_topics(bootstrap, {"in": PARTITIONS, "out": PARTITIONS})
        source = clients.producer(bootstrap)
        for i in range(RECORDS):
            source.produce("in", key=str(i).encode(), value=str(i).encode(), partition=i % PARTITIONS)
        assert source.flush(30) == 0

        for round_ in range(KILLS):
            worker = _start_worker(bootstrap)
            worker.stdout.readline()  # "ready": initialised, about to process
            time.sleep(rng.uniform(0.05, 1.0))
            if round_ == BROKER_CRASH_AT:
                broker.kill()  # the broker dies mid-transaction too
                broker.start()
                time.sleep(rng.uniform(0.5, 1.5))
            worker.kill()
            worker.wait()
        progress = _committed_inputs(bootstrap)
        assert 0 < progress < RECORDS, f"the killed workers committed {progress} of {RECORDS} inputs"

        worker = _start_worker(bootstrap)
        _, errors = worker.communicate(timeout=120)
        assert worker.returncode == 0, errors.decode()[-3000:]

        values = _read_committed(bootstrap)
    counts = Counter(values)
    duplicates = {v: n for v, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} results written more than once, e.g. {list(duplicates)[:5]}"
    assert set(counts) == {f"processed:{i}".encode() for i in range(RECORDS)}
