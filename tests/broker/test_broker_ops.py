"""Operating `strom broker`: one broker per data dir, the address it advertises, start-up errors
that name their cause, and a full disk reported as such (issue #16)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from broker_helpers import unique
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata
from kio.static.primitive import i8

from strom.broker import EmbeddedBroker
from strom.broker.lock import lock_data_dir
from strom.broker.log.records import build_batch
from strom.cli.main import main
from strom.kafka import clients
from strom.kafka.wire import WireClient
from support.processes import STROM

pytestmark = pytest.mark.broker


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


def _strom_error(monkeypatch, capsys, *args: str) -> str:
    """The one `error: ...` line (exit status 2) that `strom broker ARGS` ends with."""
    monkeypatch.setattr(sys, "argv", ["strom", "broker", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    return stderr


def test_start_up_errors_name_their_cause_and_leave_nothing_behind(tmp_path, monkeypatch, capsys):
    taken = socket.create_server(("127.0.0.1", 0))
    busy = tmp_path / "busy"
    error = _strom_error(monkeypatch, capsys, "--data-dir", str(busy), "--port", str(taken.getsockname()[1]))
    assert "already in use" in error and not busy.exists(), "the port is bound before storage is created"
    taken.close()
    error = _strom_error(monkeypatch, capsys, "--data-dir", str(busy), "--port", "99999")
    assert "99999" in error and "0-65535" in error
    error = _strom_error(monkeypatch, capsys, "--data-dir", str(busy), "--host", "192.0.2.1", "--port", "0")
    assert "not an address of this machine" in error and "stop the process" not in error.lower()
    assert not busy.exists()


@pytest.mark.slow
def test_one_broker_per_data_dir(tmp_path, monkeypatch, capsys):
    with EmbeddedBroker(tmp_path) as first:
        error = _strom_error(monkeypatch, capsys, "--data-dir", str(tmp_path), "--port", "0")
        assert f"used by another strom broker (pid {first.pid})" in error
    with EmbeddedBroker(tmp_path):
        pass  # the lock went with the first broker's process


def test_a_lock_released_while_a_forked_child_shares_it_is_taken_once_the_child_lets_go(tmp_path):
    """A JVM forked by another thread keeps the lock it was forked with until its exec: adding a user and
    then starting the broker must not fail on that (this child holds it half a second, not microseconds)."""
    descriptor = lock_data_dir(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"], pass_fds=(descriptor,))
    os.close(descriptor)
    os.close(lock_data_dir(tmp_path))
    assert child.poll() == 0, "the lock was taken while the child still held it"


@pytest.mark.slow
def test_a_damaged_dynamic_configs_file_stops_the_start_naming_it_and_what_to_do(tmp_path):
    saved = tmp_path / "dynamic-configs.json"
    bad_value = '{"broker": {"broker": {"message.max.bytes": "lots"}, "cluster-default": {}}, "groups": {}}'
    cut_short = '{"broker": {"broker": {"message.max.bytes": "2000"'
    for damage in (cut_short, '{"broker": {}, "groups": {}}', bad_value):
        saved.write_text(damage)
        started = subprocess.run([STROM, "broker", "--data-dir", str(tmp_path), "--port", "0"],
                                 capture_output=True, text=True, timeout=60)
        said = started.stderr
        assert started.returncode == 2 and said.startswith(f"error: Cannot read {saved.resolve()} ("), said
        assert said.count("\n") == 1 and "remove it to start with the static config only" in said, said
        assert [p.name for p in tmp_path.iterdir()] == [saved.name] and saved.read_text() == damage


def _advertised(bootstrap: str) -> tuple[str, int]:
    with WireClient(bootstrap) as client:
        broker = client.send(metadata.MetadataRequest(
            topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)).brokers[0]
    return broker.host, broker.port


@pytest.mark.slow
def test_the_advertised_address_is_never_the_wildcard(tmp_path):
    wildcard = BrokerProcess(tmp_path, tmp_path / "a", "--host", "0.0.0.0", "--port", "0",
                             "--allow-unauthenticated-network-access")
    named = BrokerProcess(tmp_path, tmp_path / "b", "--port", "0", "--advertised-host", "broker.example")
    listeners = BrokerProcess(tmp_path, tmp_path / "c", "--port", "0",
                              "--config", "advertised.listeners=PLAINTEXT://kafka.example:19092")
    try:
        assert _advertised(wildcard.bootstrap_servers) == (socket.getfqdn(), wildcard.port)
        assert _advertised(named.bootstrap_servers) == ("broker.example", named.port)
        assert _advertised(listeners.bootstrap_servers) == ("kafka.example", 19092)
        with WireClient(named.bootstrap_servers) as client:  # by hand, a new group starts at once
            result = client.send(describe_configs.DescribeConfigsRequest(resources=(
                describe_configs.DescribeConfigsResource(
                    resource_type=i8(4), resource_name="0",
                    configuration_keys=("group.initial.rebalance.delay.ms",)),))).results[0]
        assert [(c.name, c.value) for c in result.configs] == [("group.initial.rebalance.delay.ms", "0")]
    finally:
        for broker in (wildcard, named, listeners):
            assert broker.stop() == 0


def test_strom_broker_says_once_that_it_listens_and_that_it_stopped(tmp_path):
    running = BrokerProcess(tmp_path, tmp_path / "data")
    assert running.stop() == 0
    said = running.output()
    assert said.count("listening on") == 1 and "Ctrl-C to stop" in said, said
    assert "(PLAINTEXT; clients connect to" in said, said  # the listener named after its protocol, once
    assert said.count("stopped") == 1, said


def _buffers_of_connection_to(port: int, client: socket.socket) -> tuple[int, int]:
    """The broker side's receive and send buffer of `client`'s connection, as `ss` reports them."""
    peer = client.getsockname()[1]
    out = subprocess.run(["ss", "-tmnH", "state", "established", f"( sport = :{port} and dport = :{peer} )"],
                         capture_output=True, text=True, check=True).stdout
    found = re.search(r"rb(\d+),t\d+,tb(\d+)", out)
    assert found, out
    return int(found.group(1)), int(found.group(2))


def test_socket_buffers_are_kafkas_unless_configured(tmp_path):
    """socket.receive/send.buffer.bytes fix each client connection's buffers (Linux reports twice the
    value asked for); Kafka's 102400 by default, the OS's own autotuned ones with -1."""
    os_default = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[1])
    cases = {(): (204_800, 204_800),
             ("socket.receive.buffer.bytes=50000", "socket.send.buffer.bytes=60000"): (100_000, 120_000),
             ("socket.receive.buffer.bytes=-1",): (os_default, 204_800)}
    for configs, expected in cases.items():
        broker = BrokerProcess(tmp_path, tmp_path / unique("data"), "--port", "0",
                               *(arg for config in configs for arg in ("--config", config)))
        try:
            with socket.create_connection(("127.0.0.1", broker.port)) as client:
                assert _buffers_of_connection_to(broker.port, client) == expected, configs
        finally:
            assert broker.stop() == 0


def test_a_socket_buffer_of_zero_is_refused_with_what_is_wanted(tmp_path):
    done = subprocess.run([STROM, "broker", "--data-dir", str(tmp_path), "--port", "0", "--config",
                           "socket.send.buffer.bytes=0"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "socket.send.buffer.bytes" in done.stderr and "(or -1)" in done.stderr, done.stderr
