"""`strom transactions find-hanging` and `abort --topic --partition --producer-id|--start-offset`: a
hanging transaction (open in a partition, unknown to its coordinator) is found and aborted with a
WriteTxnMarkers abort marker, after which read_committed consumers get past it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from broker_eos.batches import data_batch
from cli.strom_cli import Strom, unique
from strom.broker.broker import Broker
from strom.broker.log.records import split_batches

pytestmark = pytest.mark.broker

LOST_PRODUCER = 987_654


class InProcessBroker:
    """A real broker on its own event loop thread, so a test can reach into its partitions the way
    nothing over the wire can: the coordinator's losing a transaction is not something a client can do
    (every transactional batch is verified), yet such batches exist in data written by older brokers."""

    def __init__(self, data_dir: Path) -> None:
        self.broker = Broker(data_dir, port=0)
        self.bootstrap_servers = f"127.0.0.1:{self.broker.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(60)

    @contextmanager
    def running(self) -> Iterator[InProcessBroker]:
        self._thread.start()
        self.run(self.broker.start())
        try:
            yield self
        finally:
            self.run(self.broker.stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    def lose_a_transaction(self, topic: str, epoch: int, value: bytes) -> None:
        """Appends a transactional batch of a producer whose coordinator knows nothing of it."""
        async def append() -> None:
            partition = self.broker.logs.partition(topic, 0)
            partition.append(split_batches(data_batch(LOST_PRODUCER, epoch, 0, [value], transactional=True)))
        self.run(append())


@pytest.fixture
def lost(tmp_path, monkeypatch, capsysbinary) -> Iterator[tuple[InProcessBroker, Strom]]:
    with InProcessBroker(tmp_path).running() as broker:
        yield broker, Strom(broker.bootstrap_servers, monkeypatch, capsysbinary)


def _json(strom: Strom, *args: str):
    return json.loads(strom.ok(*args, "--output", "json").out)


def _committed(strom: Strom, topic: str) -> list[str]:
    return strom.ok("consume", topic, "-o", "beginning", "-e", "--isolation-level", "read_committed").lines


def _hanging(strom: Strom, topic: str) -> list[dict]:
    return _json(strom, "transactions", "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")


def test_a_hanging_transaction_is_found_and_aborted_by_producer_id(lost):
    broker, strom = lost
    topic = unique("hang")
    strom.ok("topics", "create", topic)
    strom.ok("produce", topic, stdin=b"before\n")
    broker.lose_a_transaction(topic, epoch=3, value=b"lost")
    strom.ok("produce", topic, stdin=b"after\n")
    assert _committed(strom, topic) == ["before"], "the open transaction holds back read_committed"

    (hanging,) = _hanging(strom, topic)
    assert (hanging["producer_id"], hanging["producer_epoch"], hanging["open_transaction_start_offset"]) == (
        LOST_PRODUCER, 3, 1)
    aborted = strom.ok("transactions", "abort", "--topic", topic, "--partition", "0",
                       "--producer-id", str(LOST_PRODUCER)).lines
    assert aborted == [f"aborted the transaction of producer {LOST_PRODUCER} on {topic}-0 from offset 1"]
    assert _committed(strom, topic) == ["before", "after"]
    assert _hanging(strom, topic) == []
    line = strom.fails("transactions", "abort", "--topic", topic, "--partition", "0",
                       "--producer-id", str(LOST_PRODUCER))
    assert f"{topic}-0 has no open transaction of producer {LOST_PRODUCER}: nothing to abort" in line


def test_a_hanging_transaction_is_aborted_by_its_start_offset_and_a_fenced_epoch_is_refused(lost):
    broker, strom = lost
    topic = unique("hang")
    strom.ok("topics", "create", topic)
    broker.lose_a_transaction(topic, epoch=5, value=b"lost")
    strom.ok("produce", topic, stdin=b"after\n")
    assert _committed(strom, topic) == []

    line = strom.fails("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0",
                       "--producer-epoch", "4")
    assert "WriteTxnMarkers" in line and "INVALID_PRODUCER_EPOCH" in line, line
    assert len(_hanging(strom, topic)) == 1
    strom.ok("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert _committed(strom, topic) == ["after"]


@pytest.mark.parametrize("args", [
    ["--topic", "t", "--partition", "0"],
    ["--topic", "t", "--producer-id", "1"],
    ["--topic", "t", "--partition", "0", "--producer-id", "1", "--start-offset", "0"],
    ["--transactional-id", "x", "--topic", "t", "--partition", "0", "--producer-id", "1"],
    [],
])
def test_abort_wants_a_transactional_id_or_a_partition_and_a_producer(lost, args):
    _, strom = lost
    line = strom.fails("transactions", "abort", *args)
    assert "Give either --transactional-id, or --topic, --partition and exactly one of" in line, line
