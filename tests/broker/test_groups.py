"""A consumer group of three processes over six partitions: joins, a leave, rebalances (cooperative),
every record consumed, committed offsets kept across a broker restart; plus the group admin APIs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from broker_helpers import drain, unique
from confluent_kafka import ConsumerGroupState, TopicPartition

from strom.broker import EmbeddedBroker
from strom.kafka import clients

pytestmark = [pytest.mark.broker, pytest.mark.slow]

MEMBER = """
import sys, time
from pathlib import Path
from confluent_kafka import KafkaError, KafkaException
from strom.kafka import clients
bootstrap, topic, group, out, stop = sys.argv[1:6]
RETRIABLE = (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID)
consumer = clients.consumer(bootstrap, group, **{"partition.assignment.strategy": "cooperative-sticky",
                                                 "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})

def commit(message=None):  # False when a rebalance refused it: a later commit must cover the offset
    try:
        consumer.commit(message, asynchronous=False) if message else consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError._NO_OFFSET:
            return True
        assert exc.args[0].code() in RETRIABLE, exc
        return False
    return True

consumer.subscribe([topic])
with open(out, "a") as f:
    while True:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            time.sleep(0.005)  # slow members, so rebalances happen while records are in flight
            f.write(message.value().decode() + "\\n")
            f.flush()
            commit(message)
        # a refused commit of a partition's last record is covered only by this final commit
        if Path(stop).exists() and commit():
            break
consumer.close()
"""


def _start_member(bootstrap: str, topic: str, group: str, workdir: Path, name: str) -> subprocess.Popen:
    args = [bootstrap, topic, group, str(workdir / f"{name}.out"), str(workdir / f"{name}.stop")]
    return subprocess.Popen([sys.executable, "-c", MEMBER, *args])


def _consumed(workdir: Path) -> list[str]:
    return [line for path in workdir.glob("*.out") for line in path.read_text().split()]


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _run_members(bootstrap: str, topic: str, group: str, workdir: Path, members: dict) -> None:
    """a consumes alone, b and c join, b leaves; waits for every record, then stops a and c."""
    _wait(lambda: len(_consumed(workdir)) > 50, 60, "the first member to consume")
    for name in ("b", "c"):
        members[name] = _start_member(bootstrap, topic, group, workdir, name)
    _wait(lambda: all((workdir / f"{n}.out").exists() and (workdir / f"{n}.out").stat().st_size
                      for n in ("b", "c")), 60, "the joining members to get partitions")
    (workdir / "b.stop").touch()  # b leaves the group; a and c take over its partitions
    members["b"].wait(30)
    _wait(lambda: set(_consumed(workdir)) >= {str(i) for i in range(900)}, 90, "every record")
    for name in ("a", "c"):
        (workdir / f"{name}.stop").touch()
    for process in members.values():
        assert process.wait(30) == 0


def test_three_member_processes_share_six_partitions(tmp_path):
    topic, group = "events", "three"
    with EmbeddedBroker(data_dir=tmp_path / "data") as broker:
        clients.create_topics(broker.bootstrap_servers, {topic: 6})
        producer = clients.producer(broker.bootstrap_servers)
        for i in range(900):
            producer.produce(topic, key=str(i).encode(), value=str(i).encode())
        assert producer.flush(20) == 0

        members = {"a": _start_member(broker.bootstrap_servers, topic, group, tmp_path, "a")}
        try:
            _run_members(broker.bootstrap_servers, topic, group, tmp_path, members)
        finally:
            for process in members.values():
                if process.poll() is None:
                    process.kill()
                    process.wait()

        assert set(_consumed(tmp_path)) == {str(i) for i in range(900)}
        broker.restart()
        consumer = clients.consumer(broker.bootstrap_servers, group)
        partitions = [TopicPartition(topic, p) for p in range(6)]
        committed = consumer.committed(partitions, timeout=10)
        ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions]
        consumer.close()
    assert [tp.offset for tp in committed] == ends
    assert sum(ends) == 900


def test_group_admin_describe_list_delete(broker):
    topic, group = unique("admin-groups"), unique("g")
    clients.create_topics(broker.bootstrap_servers, {topic: 2})
    producer = clients.producer(broker.bootstrap_servers)
    producer.produce(topic, value=b"x")
    producer.flush(10)
    consumer = clients.consumer(broker.bootstrap_servers, group)
    consumer.subscribe([topic])
    drain(consumer, 1)
    consumer.commit(asynchronous=False)
    admin = clients.admin(broker.bootstrap_servers)

    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.state == ConsumerGroupState.STABLE
    assert len(described.members) == 1
    assigned = {tp.partition for tp in described.members[0].assignment.topic_partitions}
    assert assigned == {0, 1}
    listed = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}

    with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
        admin.delete_consumer_groups([group])[group].result(10)
    consumer.close()
    admin.delete_consumer_groups([group])[group].result(10)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
