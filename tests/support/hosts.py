"""Hosts of their own for fault tests: one network namespace per host, joined by a bridge, and the
faults a network makes (partitions, slow and lossy links) plus paused processes, Jepsen-style.

    from support.hosts import Network              # tests/ is on sys.path under pytest

    with Network() as network:                     # pytest.skip()s first where namespaces are not allowed
        kafka0 = network.host("kafka0")            # namespace sf<pid>x<run>-kafka0, address 10.213.<n>.1
        kafka0.address, kafka0.command(["java", ...])   # ip netns exec sf<pid>x0-kafka0 java ...
        network.partition(a, b)                    # a and b cannot reach each other
        network.partition(a, b, both_ways=False)   # a's packets to b dropped, b's to a arrive
        network.isolate(a)                         # a reaches nobody, nobody reaches a
        network.delay(a, 200, jitter_ms=100)       # every packet a sends waits 200 ms +- 100 ms
        network.loss(a, 5)                         # every packet a sends is dropped with 5 % probability
        network.heal()                             # every partition, delay and loss gone
        pause(pid); resume(pid)                    # SIGSTOP / SIGCONT (a long GC pause, a frozen VM)
        kafka0.kill()                              # SIGKILL every process on the host (a machine dies)
        network.left_behind()                      # per host, the processes still running on it

The existing kills of single components work on hosts too: ``KafkaCluster(hosts=...).kill(node)`` and
``SparkCluster(hosts=...).kill_worker(i)`` (tests/support/apache_kafka.py, spark_cluster.py).

Each host has a veth pair whose one end (``eth0``) is in the host's namespace and the other on the run's
bridge, which has address ``.254`` of the run's /24 in 10.213.0.0/16, so the test process (in no
namespace of its own) reaches every host. Nothing leaves the machine: the namespaces have no route but
the bridge's subnet. Faults are iptables rules in a host's own namespace (chains ``FAULTS-IN`` and
``FAULTS-OUT``): a partition drops packets (a cut link: connections hang until their timeouts, as a
real partition makes them); loss drops at random (``statistic``). This kernel has no ``netem`` qdisc, so
a delay queues the host's outgoing packets to a process in its namespace (``NFQUEUE``) that releases
each after its delay (this module, run as a script: ``hosts.py delay QUEUE MS JITTER``).

Names carry the test process's pid (``sf<pid>x<run>-<host>``, bridge ``sfbr<pid>x<run>``): a new ``Network``
first removes what a dead process left (its namespaces, the processes still in them, its bridge), and
``close()`` (also at interpreter exit) removes its own, so a crashed test leaves nothing behind for long.
"""

from __future__ import annotations

import atexit
import contextlib
import heapq
import itertools
import os
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

PREFIX = "sf"
BRIDGE_PREFIX = "sfbr"
SUBNETS = "10.213"
_QUEUE = 0  # the NFQUEUE number a delayed host's packets go to (one queue per namespace)


class NamespacesNotAllowed(RuntimeError):
    """Network namespaces cannot be made here (not root, no CAP_NET_ADMIN, no iptables)."""


def _run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(command), capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_allowed() -> None:
    """Raises ``NamespacesNotAllowed`` with what to do when this machine cannot run fault tests."""
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            raise NamespacesNotAllowed(f"the fault tests need `{tool}` (make tools: apt-get install iproute2 "
                                       "iptables)")
    probe = f"{PREFIX}{os.getpid()}-probe"
    result = _run("ip", "netns", "add", probe, check=False)
    if result.returncode != 0:
        raise NamespacesNotAllowed("network namespaces are not allowed here (the fault tests need root, "
                                   "or CAP_SYS_ADMIN and CAP_NET_ADMIN, as CI has): `ip netns add` said "
                                   f"{result.stderr.strip()!r}")
    try:
        rule = _run("ip", "netns", "exec", probe, "iptables", "-S", check=False)
        if rule.returncode != 0:
            raise NamespacesNotAllowed(f"iptables does not work in a namespace here: {rule.stderr.strip()}")
    finally:
        _run("ip", "netns", "del", probe, check=False)


def _owner(name: str, prefix: str) -> int | None:
    match = re.fullmatch(rf"{prefix}(\d+)(\D.*)?", name)
    return int(match.group(1)) if match else None


def remove_leftovers() -> list[str]:
    """Removes the namespaces and bridges of runs whose process is gone, killing the processes still in
    them; returns their names."""
    removed = []
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        owner = _owner(name, PREFIX)
        if owner is not None and not _alive(owner):
            _kill_namespace(name)
            removed.append(name)
    for line in _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        owner = _owner(name, BRIDGE_PREFIX)
        if owner is not None and not _alive(owner):
            _run("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed


def _kill_namespace(name: str) -> None:
    Host(name, name, "").kill()
    _run("ip", "netns", "del", name, check=False)


def pause(pid: int) -> None:
    """Freezes process ``pid`` (SIGSTOP): it holds its sockets and believes it runs, as in a long GC or
    VM pause; ``resume`` wakes it."""
    os.kill(pid, signal.SIGSTOP)


def resume(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


@dataclass
class Host:
    """One machine of the test: a network namespace with one address on the run's bridge."""

    name: str
    namespace: str
    address: str
    delayer: subprocess.Popen | None = field(default=None, repr=False)

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host (in its namespace; the same files, users and environment)."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run(*self.command(argv), check=check)

    def iptables(self, *rule: str) -> None:
        self.run("iptables", "-w", *rule)

    def pids(self) -> list[int]:
        """The processes running on this host (in its namespace)."""
        return [int(pid) for pid in _run("ip", "netns", "pids", self.namespace, check=False).stdout.split()]

    def kill(self) -> None:
        """SIGKILLs every process on this host, paused ones too (a machine that dies at once)."""
        for _ in range(3):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)  # a paused process dies only once it runs
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)


class Network:
    """The hosts of one test run and the faults between them; a context manager (``close()`` otherwise)."""

    _runs = itertools.count()

    def __init__(self) -> None:
        self.run_id = f"{os.getpid()}x{next(self._runs)}"
        self.bridge = f"{BRIDGE_PREFIX}{self.run_id}"
        self.hosts: dict[str, Host] = {}
        self._subnet = ""
        self._started = False

    def __enter__(self) -> Network:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def start(self) -> Network:
        """Creates the bridge (after removing what dead runs left); skips the test where not allowed."""
        try:
            check_allowed()
        except NamespacesNotAllowed as error:
            import pytest

            pytest.skip(str(error))
        remove_leftovers()
        self._subnet = self._free_subnet()
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        atexit.register(self.close)
        self._started = True
        _run("ip", "addr", "add", f"{self._subnet}.254/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        return self

    @staticmethod
    def _free_subnet() -> str:
        used = set(re.findall(rf"{re.escape(SUBNETS)}\.(\d+)\.", _run("ip", "-o", "addr").stdout))
        start = os.getpid() % 250
        for step in range(250):
            third = (start + step) % 250 + 1
            if str(third) not in used:
                return f"{SUBNETS}.{third}"
        raise RuntimeError(f"every /24 of {SUBNETS}.0.0/16 is in use by other runs")

    @property
    def gateway(self) -> str:
        """The test process's own address on the bridge (how it reaches the hosts)."""
        return f"{self._subnet}.254"

    def host(self, name: str) -> Host:
        """A new host ``name``: its namespace, its veth on the bridge, the next address of the subnet."""
        index = len(self.hosts) + 1
        host = Host(name, f"{PREFIX}{self.run_id}-{name}", f"{self._subnet}.{index}")
        outside = f"{PREFIX}{self.run_id}h{index}"  # at most 15 characters, as Linux allows
        _run("ip", "netns", "add", host.namespace)
        self.hosts[name] = host
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        _run("ip", "link", "set", outside, "master", self.bridge, "up")
        host.run("ip", "link", "set", "lo", "up")
        host.run("ip", "addr", "add", f"{host.address}/24", "dev", "eth0")
        host.run("ip", "link", "set", "eth0", "up")
        for chain, hook, flag in (("FAULTS-IN", "INPUT", "-i"), ("FAULTS-OUT", "OUTPUT", "-o")):
            host.iptables("-N", chain)
            host.iptables("-A", hook, flag, "eth0", "-j", chain)
        return host

    def partition(self, a: Host, b: Host, both_ways: bool = True) -> None:
        """Packets from ``a`` to ``b`` are dropped (and from ``b`` to ``a`` when ``both_ways``); rules in
        ``a``'s namespace only, so ``b`` may also be the test process (``network.gateway``)."""
        target = b.address if isinstance(b, Host) else b
        a.iptables("-I", "FAULTS-OUT", "-d", target, "-j", "DROP")
        if both_ways:
            a.iptables("-I", "FAULTS-IN", "-s", target, "-j", "DROP")

    def isolate(self, host: Host) -> None:
        """``host`` reaches nobody and nobody reaches it (its loopback still works)."""
        host.iptables("-I", "FAULTS-OUT", "-j", "DROP")
        host.iptables("-I", "FAULTS-IN", "-j", "DROP")

    def loss(self, host: Host, percent: float) -> None:
        """Each packet ``host`` sends is dropped with probability ``percent`` / 100."""
        host.iptables("-I", "FAULTS-OUT", "-m", "statistic", "--mode", "random", "--probability",
                      f"{percent / 100:.4f}", "-j", "DROP")

    def delay(self, host: Host, ms: float, jitter_ms: float = 0.0) -> None:
        """Each packet ``host`` sends waits ``ms`` +- ``jitter_ms`` (uniform; packets may overtake each
        other, as with netem's jitter) before it leaves."""
        if host.delayer is not None:
            raise RuntimeError(f"{host.name} is delayed already: heal() first")
        host.delayer = subprocess.Popen(
            host.command([sys.executable, __file__, "delay", str(_QUEUE), str(ms), str(jitter_ms)]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = host.delayer.stdout.readline()
        if ready.strip() != "ready":
            host.delayer.kill()
            raise RuntimeError(f"the delayer of {host.name} did not start: {host.delayer.stderr.read()}")
        host.iptables("-A", "FAULTS-OUT", "-j", "NFQUEUE", "--queue-num", str(_QUEUE), "--queue-bypass")

    def heal(self) -> None:
        """Every partition, loss and delay removed (delayed packets still queued are released first), on
        every host at once: one after the other, a dozen hosts' iptables commands and delayers' ends took
        seconds on a busy machine, during which some links were healed and others not."""
        with ThreadPoolExecutor(max(1, len(self.hosts))) as healing:
            list(healing.map(_heal, list(self.hosts.values())))

    def left_behind(self) -> dict[str, list[str]]:
        """Per host, the command lines of the processes still running on it."""
        return {host.name: [_command_line(pid) for pid in pids]
                for host in self.hosts.values() if (pids := host.pids())}

    def close(self) -> None:
        """Kills what still runs on the hosts, removes the namespaces and the bridge."""
        if not self._started:
            return
        self._started = False
        for host in self.hosts.values():
            if host.delayer is not None:
                host.delayer.kill()
                host.delayer.wait(10)
        for host in self.hosts.values():
            _kill_namespace(host.namespace)
        _run("ip", "link", "del", self.bridge, check=False)
        self.hosts.clear()
        with contextlib.suppress(ValueError):
            atexit.unregister(self.close)


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode(errors="replace")
    except OSError:
        return f"{pid} (gone)"


def _heal(host: Host) -> None:
    host.iptables("-F", "FAULTS-OUT")
    host.iptables("-F", "FAULTS-IN")
    if host.delayer is not None:
        host.delayer.terminate()
        host.delayer.wait(10)
        host.delayer = None


# The delayer: a minimal nfnetlink_queue client (linux/netfilter/nfnetlink_queue.h), as netem is missing.
_NETLINK_NETFILTER = 12
_SUBSYS_QUEUE = 3
_MSG_PACKET, _MSG_VERDICT, _MSG_CONFIG = 0, 1, 2
_CFG_CMD, _CFG_PARAMS, _CFG_QUEUE_MAXLEN, _CFG_MASK, _CFG_FLAGS = 1, 2, 3, 4, 5
_CMD_BIND = 1
_COPY_META = 1
_F_FAIL_OPEN = 1
_ATTR_PACKET_HDR, _ATTR_VERDICT_HDR = 1, 2
_NF_ACCEPT = 1
_REQUEST, _ACK = 1, 4
_DONE, _ERROR = 3, 2


def _attribute(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def _message(kind: int, queue: int, attributes: bytes, flags: int = _REQUEST, seq: int = 0) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attributes
    return struct.pack("=IHHII", 16 + len(body), (_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def _configure(sock: socket.socket, queue: int) -> None:
    """Binds ``queue`` (metadata only: packet ids), long enough for packets held ~1 s, fail-open."""
    requests = [
        _attribute(_CFG_CMD, struct.pack("!BxH", _CMD_BIND, socket.AF_INET)),
        _attribute(_CFG_PARAMS, struct.pack("!IB", 0, _COPY_META)),
        _attribute(_CFG_QUEUE_MAXLEN, struct.pack("!I", 65536)),
        _attribute(_CFG_MASK, struct.pack("!I", _F_FAIL_OPEN)) + _attribute(_CFG_FLAGS,
                                                                            struct.pack("!I", _F_FAIL_OPEN)),
    ]
    for seq, attributes in enumerate(requests, 1):
        sock.send(_message(_MSG_CONFIG, queue, attributes, _REQUEST | _ACK, seq))
        reply = sock.recv(65536)
        kind = struct.unpack_from("=H", reply, 4)[0]
        if kind == _ERROR and struct.unpack_from("=i", reply, 16)[0] != 0:
            raise OSError(-struct.unpack_from("=i", reply, 16)[0], f"nfqueue config {seq} refused")


def _packet_ids(data: bytes) -> list[int]:
    ids, offset = [], 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16:
            break
        if kind & 0xFF == _MSG_PACKET and kind >> 8 == _SUBSYS_QUEUE:
            at = offset + 20
            while at + 4 <= offset + length:
                size, attribute = struct.unpack_from("=HH", data, at)
                if size < 4:
                    break
                if attribute & 0x7FFF == _ATTR_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, at + 4)[0])
                at += (size + 3) & ~3
        offset += (length + 3) & ~3
    return ids


def delay_packets(queue: int, ms: float, jitter_ms: float) -> None:
    """Holds every packet of ``queue`` for ``ms`` +- ``jitter_ms`` before accepting it, until SIGTERM
    (then releases what it holds)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 0))
    _configure(sock, queue)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    held: list[tuple[float, int]] = []
    print("ready", flush=True)

    def accept(packet_id: int) -> None:
        verdict = _attribute(_ATTR_VERDICT_HDR, struct.pack("!II", _NF_ACCEPT, packet_id))
        with contextlib.suppress(OSError):
            sock.send(_message(_MSG_VERDICT, queue, verdict))

    while not stopping:
        now = time.monotonic()
        while held and held[0][0] <= now:
            accept(heapq.heappop(held)[1])
        wait = min(0.5, held[0][0] - now) if held else 0.5
        try:
            readable, _, _ = select.select([sock], [], [], max(0.0, wait))
        except InterruptedError:
            continue
        if readable:
            try:
                data = sock.recv(1 << 20)
            except OSError:  # ENOBUFS: the kernel dropped messages (fail-open accepts past the queue's end)
                continue
            now = time.monotonic()
            for packet_id in _packet_ids(data):
                late = max(0.0, ms + random.uniform(-jitter_ms, jitter_ms)) / 1000
                heapq.heappush(held, (now + late, packet_id))
    for _, packet_id in held:
        accept(packet_id)


if __name__ == "__main__":
    if sys.argv[1:2] == ["delay"]:
        delay_packets(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(f"usage: {sys.argv[0]} delay QUEUE MS JITTER_MS")
