"""Scenario 8 of issue 39: ``strom broker`` with a client partitioned mid-transaction.

A transactional client (``transaction_client.py``, plain confluent-kafka, on a host of its own) writes
records in a transaction, then is cut off from the broker: for longer than its ``transaction.timeout.ms``
(6 s), or for 2 s, short of it (its timeout then 30 s). Cut off longer, the broker must abort the
transaction on its own: nothing of it visible read_committed, and the last stable offset moves past it
(consumers read_committed are not held up); healed, the client's commit of the timed-out transaction
must fail, and the client recover (its next transaction committed within 60 s of the heal). Cut off
shorter, the transaction commits. Either way exactly as on Apache Kafka: the same scenario runs against
the topology's Kafka cluster (``topology.py``) and the answers are compared. Each broker aborts
timed-out transactions every second (``transaction.abort.timed.out.transaction.cleanup.interval.ms``),
so the abort comes 6-7 s after the transaction began.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from strom.kafka import clients
from support.hosts import Host, Network
from support.kafka import read_topic, unique
from support.processes import STROM

from .topology import CLEANUP, Topology, settled_at

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420),
              pytest.mark.usefixtures("tasks")]  # the applications start now, overlapping this (conftest.py)

CLIENT = Path(__file__).with_name("transaction_client.py")
TRANSACTION_TIMEOUT_S = 6.0
"""The client's ``transaction.timeout.ms`` when cut off until the broker aborts: short, as the test waits
it out twice (Kafka, strom)."""
SHORT_CUT_S = 2.0
RECOVERY_S = 60.0
"""From the heal until the client, recovered, committed its next transaction (the issue's bound on every
scenario's catching up)."""
BROKER_START_S = 180.0
"""How long ``strom broker`` may take to serve: seconds on a quiet machine, beyond 60 at load 90 (its
interpreter and imports share two cores with the topology's JVMs starting). Not what the scenario is
about: the bound only tells a broker that never serves from a slow start."""
SHORT_CUT_TIMEOUT_S = 30.0
"""The client's ``transaction.timeout.ms`` when cut off for ``SHORT_CUT_S``: the cut is short of it, and so
must be everything else the transaction lives through: its opening, the test's rules for the cut, its
read_committed check, the heal and the commit. At load 77-135 those took more than a 6 s timeout's
remaining 4 s (Apache Kafka, the judge, then aborted the transaction itself); the test asserts the
transaction's measured life stays short of this."""


@pytest.fixture(scope="module")
def strom_broker(topology: Topology, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``strom broker`` as a user runs it, on host ``strom``; its bootstrap servers. Its address is
    beyond loopback (the host's own, inside the sandbox) and unauthenticated: the broker refuses that
    unless told."""
    host = topology.host("strom")
    data = tmp_path_factory.mktemp("strom-broker")
    command = [STROM, "broker",
               "--data-dir", str(data), "--host", host.address, "--port", "9092",
               "--allow-unauthenticated-network-access",
               *(f"--config={key}={value}" for key, value in CLEANUP.items())]
    with open(data / "stdout.log", "ab") as log:
        process = subprocess.Popen(host.command(command), stdout=log, stderr=subprocess.STDOUT)
    bootstrap = f"{host.address}:9092"
    try:
        started = time.monotonic()
        while not _serving(bootstrap):
            assert process.poll() is None and time.monotonic() - started < BROKER_START_S, \
                f"strom broker not serving after {BROKER_START_S:.0f} s: {(data / 'stdout.log').read_text()}"
        print(f"strom broker serving {time.monotonic() - started:.1f} s after its start")
        yield bootstrap
    finally:
        process.terminate()
        process.wait(30)


def _serving(bootstrap: str) -> bool:
    try:
        clients.admin(bootstrap).list_topics(timeout=2)
    except KafkaException:  # not listening yet
        time.sleep(0.2)
        return False
    return True


def partitioned_mid_transaction(network: Network, client_host: Host, broker_hosts: list[Host],
                                bootstrap: str, cut_s: float | None) -> dict[str, object]:
    """The scenario on one broker (or cluster), the client cut off for ``cut_s`` or, with None, until
    the broker aborted the transaction and 2 s more; what the client answered, what was visible, when
    (``recovered_s``: from the heal until the client's next transaction committed and it exited)."""
    topic = unique("faults-txn")
    clients.create_topics(bootstrap, {topic: 1})
    timeout_s = SHORT_CUT_TIMEOUT_S if cut_s else TRANSACTION_TIMEOUT_S
    command = client_host.command([sys.executable, str(CLIENT), bootstrap, topic, unique("faults-txn-id"),
                                   str(int(timeout_s * 1000))])
    client = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    aborted_after = None
    try:
        assert client.stdout.readline().strip() == "open", client.stderr.read()
        opened = time.monotonic()
        for broker_host in broker_hosts:
            network.partition(client_host, broker_host)
        cut = time.monotonic()
        assert read_topic(bootstrap, topic, timeout=1 if cut_s else 5) == []  # open: not read_committed
        if cut_s is None:
            aborted_after = round(settled_at(bootstrap, topic, 1, 60) - cut, 1)
            assert read_topic(bootstrap, topic, timeout=5) == [], "the timed-out transaction became visible"
        time.sleep(max(0.0, (cut_s or TRANSACTION_TIMEOUT_S + 2) - (time.monotonic() - cut)))
        network.heal()
        healed = time.monotonic()
        output, errors = client.communicate("healed\n", timeout=180)
        recovered_s = time.monotonic() - healed
    finally:
        network.heal()
        client.kill()
    assert client.returncode == 0, errors
    answer = json.loads(output.strip().splitlines()[-1])
    values = [record.value().decode() for record in read_topic(bootstrap, topic, expected=5, timeout=30)]
    return {**answer, "visible": values, "aborted_after_s": aborted_after, "cut_s": round(healed - cut, 1),
            "lived_s": round(healed + recovered_s - opened, 1), "recovered_s": round(recovered_s, 1),
            "timeout_s": timeout_s}


@pytest.mark.parametrize("cut_s", [None, SHORT_CUT_S], ids=["until-aborted", "2s"])
def test_a_client_cut_off_mid_transaction_recovers_as_on_kafka(topology, strom_broker, cut_s):
    client = topology.host("client")
    kafka_hosts = [topology.host(f"kafka-{node}") for node in range(topology.kafka.brokers)]
    on_kafka = partitioned_mid_transaction(topology.network, client, kafka_hosts, topology.bootstrap, cut_s)
    on_strom = partitioned_mid_transaction(topology.network, client, [topology.host("strom")], strom_broker,
                                           cut_s)
    opened = [f"open-{i}" for i in range(5)]
    expected = [*(opened if cut_s else []), *(f"after-{i}" for i in range(5))]
    assert on_kafka["visible"] == expected, on_kafka  # the judge itself
    assert on_strom["visible"] == expected, on_strom
    if cut_s is None:
        assert on_strom["aborted_after_s"] < TRANSACTION_TIMEOUT_S + 5, on_strom
    else:  # each transaction lived (opened to committed) short of its timeout: what this case is about
        assert max(on_kafka["lived_s"], on_strom["lived_s"]) < SHORT_CUT_TIMEOUT_S, (on_kafka, on_strom)
    assert on_strom["recovered_s"] < RECOVERY_S, on_strom  # the bound: caught up within 60 s
    for key in ("commit", "fatal", "abortable", "recovery"):
        assert on_strom.get(key) == on_kafka.get(key), f"strom {on_strom}\nkafka {on_kafka}"
    print(f"Apache Kafka: {on_kafka}\nstrom broker: {on_strom}")
