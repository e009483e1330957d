"""Operating `strom broker`: one broker per data dir, the address it advertises, start-up errors
that name their cause, and a full disk reported as such (issue #16)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from broker_helpers import unique
from kio.schema.errors import ErrorCode

from strom.broker.log.records import build_batch
from strom.kafka import clients
from strom.kafka.wire import WireClient

pytestmark = pytest.mark.broker
STROM = str(Path(sys.executable).with_name("strom"))


class BrokerProcess:
    """`strom broker` as an operator runs it, its stderr in a file."""

    def __init__(self, tmp_path: Path, data_dir: Path, *args: str) -> None:
        self.stderr_path = tmp_path / f"broker-{unique('err')}.log"
        with open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen([STROM, "broker", "--data-dir", str(data_dir), *args],
                                            stdout=err, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not (found := re.search(r"listening on \S+?:(\d+)", self.output())):
            assert self.process.poll() is None, self.output()
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.05)
        self.port = int(found.group(1))

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)


def _produce(bootstrap: str, topic: str, partition: int, value: bytes) -> ErrorCode:
    from broker_eos.wire import send_batch

    with WireClient(bootstrap) as client:
        return send_batch(client, topic, partition, build_batch([(None, value)], int(time.time() * 1000)))[0]


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs: a real file system that fills up."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the disk-full path is also tested at the file layer)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)], check=True)
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.slow
def test_a_full_disk_is_reported_as_such_and_shutdown_closes_every_partition(tmp_path, small_disk):
    broker = BrokerProcess(tmp_path, small_disk / "data", "--port", "0")
    topic = unique("full")
    clients.create_topics(broker.bootstrap_servers, {topic: 2})
    codes = [_produce(broker.bootstrap_servers, topic, i % 2, bytes(200_000)) for i in range(30)]
    assert codes[0] == ErrorCode.none
    assert codes[-1] == codes[-2] == ErrorCode.kafka_storage_error
    output = broker.output()
    for partition in (0, 1):
        lines = [line for line in output.splitlines() if f"{topic}-{partition}" in line and "disk" in line]
        assert len(lines) == 1, output  # one line per partition, not one per retry
        assert "No space left on device" in lines[0] and "free space" in lines[0]
    assert broker.stop() == 0
    output = broker.output()
    assert "Traceback" not in output, output
    assert "strom broker stopped" in output
