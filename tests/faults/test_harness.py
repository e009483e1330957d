"""The fault harness itself (tests/support/hosts.py): hosts reach each other through the bridge, and each
fault really does what it says on a TCP connection; heal() undoes it. Fast (a few seconds)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.hosts import PREFIX, Host, Network, pause, resume

PORT = 7070
ECHO = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
while True:
    connection, _ = server.accept()
    with connection:
        while data := connection.recv(4096):
            connection.sendall(data)
"""
CONNECT = """
import socket, sys, time
took = []
for _ in range(int(sys.argv[4])):
    started = time.monotonic()
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    except OSError as error:
        sys.exit(f"no connection: {error}")
    took.append(time.monotonic() - started)
print(min(took))
"""
TRIES = 5
"""Connections whose quickest is timed: a loaded machine (load 80) only ever adds to a connection's time
(the process waits for a core), so the quickest of a few is the link's own."""
RECEIVE = f"""
import socket, sys
receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
receiver.bind((sys.argv[1], {PORT}))
print("bound", flush=True)
sys.stdin.readline()  # the sender's process has ended: what it sent arrived by now, or never does
receiver.settimeout(1.5)
try:
    print(receiver.recv(100).decode())
except TimeoutError:
    print("nothing")
"""
SKIPPED = """
import sys
import pytest
sys.path.insert(0, sys.argv[1])
from support.hosts import Network
try:
    Network().start()
except pytest.skip.Exception as skipped:
    print(skipped.msg)
"""


@pytest.fixture(scope="module")
def network() -> Iterator[Network]:
    """Hosts a and b; once the module's tests are done, no process may be left on them."""
    with Network() as running:
        running.host("a")
        running.host("b")
        yield running
        assert not running.left_behind(), "processes left behind on the hosts after the tests"


@pytest.fixture(scope="module")
def echo(network: Network) -> Iterator[Host]:
    """An echo server on host b (port ``PORT``)."""
    b = network.hosts["b"]
    server = subprocess.Popen(b.command([sys.executable, "-c", ECHO, b.address, str(PORT)]),
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "listening"
    yield b
    server.kill()
    server.wait()


@pytest.fixture(autouse=True)
def _healed(network: Network) -> Iterator[None]:
    yield
    network.heal()


def connect_from(host: Host, target: Host, timeout: float = 2.0, tries: int = 1) -> float | None:
    """Seconds a TCP connection from ``host`` to ``target``'s echo server took (the quickest of
    ``tries``); None if one did not come."""
    result = subprocess.run(host.command([sys.executable, "-c", CONNECT, target.address, str(PORT),
                                          str(timeout), str(tries)]), capture_output=True, text=True,
                            timeout=60)
    return float(result.stdout) if result.returncode == 0 else None


def test_hosts_reach_each_other_until_partitioned(network, echo):
    a = network.hosts["a"]
    assert connect_from(a, echo) is not None
    network.partition(a, echo)
    assert connect_from(a, echo, timeout=1.0) is None
    network.heal()
    assert connect_from(a, echo) is not None


def test_a_one_way_partition_cuts_only_that_way(network, echo):
    a = network.hosts["a"]
    network.partition(a, echo, both_ways=False)
    assert not datagram_arrives(a, echo)
    assert datagram_arrives(echo, a)


def datagram_arrives(sender: Host, receiver: Host) -> bool:
    """Whether a UDP datagram ``sender`` sends reaches ``receiver`` (no answer needed, unlike TCP; a
    datagram the sender's own rules drop fails its send)."""
    listener = subprocess.Popen(receiver.command([sys.executable, "-c", RECEIVE, receiver.address]),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert listener.stdout.readline().strip() == "bound"
    send = (f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
            f".sendto(b'hello', ('{receiver.address}', {PORT}))")
    sender.run(sys.executable, "-c", send, check=False)  # EPERM when dropped
    return listener.communicate("sent\n", timeout=60)[0].strip() == "hello"


def test_a_partition_cuts_an_established_connection_and_heal_restores_it(network, echo):
    with socket.create_connection((echo.address, PORT), timeout=5) as connection:
        connection.sendall(b"before")
        assert connection.recv(100) == b"before"
        network.partition(echo, network.gateway)  # b and the test process: cut
        connection.sendall(b"during")
        connection.settimeout(1.5)
        with pytest.raises(TimeoutError):
            connection.recv(100)
        network.heal()
        connection.settimeout(15)  # TCP retransmits the unacknowledged bytes after its backoff
        assert connection.recv(100) == b"during"


def test_isolate_cuts_every_link(network, echo):
    network.isolate(echo)
    assert connect_from(network.hosts["a"], echo, timeout=1.0) is None
    with pytest.raises(OSError):
        socket.create_connection((echo.address, PORT), timeout=1.0)


def test_delay_delays_and_heal_restores(network, echo):
    a = network.hosts["a"]
    quick = connect_from(a, echo, tries=TRIES)
    assert quick is not None and quick < 0.25
    network.delay(echo, 300, jitter_ms=20)  # the SYN-ACK leaves b 280-320 ms late
    slow = connect_from(a, echo, tries=TRIES)
    assert slow is not None and 0.28 <= slow < 1.5
    started = time.monotonic()
    with socket.create_connection((echo.address, PORT), timeout=5) as connection:
        for _ in range(3):
            connection.sendall(b"x")
            assert connection.recv(10) == b"x"
    assert time.monotonic() - started >= 4 * 0.28  # the SYN-ACK and three echoes, each delayed
    network.heal()
    again = connect_from(a, echo, tries=TRIES)
    assert again is not None and again < 0.25


def test_loss_drops_packets(network, echo):
    network.loss(echo, 100)
    assert connect_from(network.hosts["a"], echo, timeout=1.0) is None
    network.heal()
    network.loss(echo, 30)  # most connections still come through (SYN-ACKs are retransmitted)
    assert connect_from(network.hosts["a"], echo, timeout=10.0) is not None


def test_pause_freezes_a_process_until_resumed():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    try:
        pause(sleeper.pid)
        time.sleep(0.2)
        assert _state(sleeper.pid) == "T"
        resume(sleeper.pid)
        time.sleep(0.2)
        assert _state(sleeper.pid) in {"S", "R"}
    finally:
        sleeper.kill()
        sleeper.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_kill_ends_every_process_on_a_host_paused_ones_too(network):
    a = network.hosts["a"]
    sleepers = [subprocess.Popen(a.command(["sleep", "600"])) for _ in range(2)]
    running_on(a, sleepers)
    pause(sleepers[0].pid)
    a.kill()
    assert [sleeper.wait(timeout=10) for sleeper in sleepers] == [-9, -9]
    assert a.pids() == []


def running_on(host: Host, processes: list[subprocess.Popen]) -> None:
    """Waits until ``processes`` (started with ``host.command``, which execs them: the same pids) run on
    ``host``: until ``ip netns exec`` entered its namespace, a kill of the host cannot see them."""
    deadline = time.monotonic() + 30
    while not {process.pid for process in processes} <= set(host.pids()):
        assert time.monotonic() < deadline, f"not running on {host.name}: {host.pids()}"
        time.sleep(0.05)


def test_where_namespaces_are_not_allowed_a_fault_test_skips_saying_why():
    """Root without its capabilities (``setpriv``: as an unprivileged user or a container without
    CAP_SYS_ADMIN would be): the network's start skips the test with a message naming what is missing."""
    tests = Path(__file__).parents[1]
    result = subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-c",
                             SKIPPED, str(tests)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("network namespaces are not allowed here (the fault tests need root"), \
        result.stdout


def test_what_a_dead_run_left_is_removed_by_the_next(network):
    """A run SIGKILLed mid-test leaves its namespaces and the processes in them: the next run's start
    removes both."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    leftover = f"{PREFIX}{gone.pid}-x"
    subprocess.run(["ip", "netns", "add", leftover], check=True)
    orphan = subprocess.Popen(["ip", "netns", "exec", leftover, "sleep", "600"])
    try:
        running_on(Host(leftover, leftover, ""), [orphan])
        with Network():
            pass
        assert leftover not in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                              text=True).stdout
        assert orphan.wait(timeout=10) == -9
    finally:
        orphan.kill()
        subprocess.run(["ip", "netns", "del", leftover], capture_output=True)
