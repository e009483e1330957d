"""Scenario 7 of issue 39: ``strom.tasks`` (Decaton-style: at-least-once, per-key order) on the
topology, beside the word count and under the same faults. Two subscription processes
(``tasks_processor.py``), each on a host of its own (``tasks-0``, ``tasks-1``), share a 3-partition topic
of the topology's Kafka cluster while keyed input keeps arriving (``Feeder``). At the end every record
must have been processed, each process must have processed each key's records in the log's order, and
a record processed twice only as a replay from an earlier position (the partition moved: its new owner
starts from the last committed offset), as docs/tasks.md says."""

from __future__ import annotations

import contextlib
import itertools
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException

from strom.kafka import clients
from support.kafka import committed_offsets, create_topic, end_offsets, unique, wait_for

from .topology import Topology

PROCESSOR = Path(__file__).with_name("tasks_processor.py")
KEYS = 12
PARTITIONS = 3
PER_SECOND = 60


class Feeder:
    """Keyed records (``k<i>``, value: the key's running count) at about ``PER_SECOND`` until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.produced: dict[str, int] = defaultdict(int)
        self.failed: list[object] = []
        self._bootstrap, self._topic = bootstrap, topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        producer = clients.producer(self._bootstrap)
        sequence = 0
        while not self._stop.wait(1 / PER_SECOND):
            key = f"k{sequence % KEYS}"
            clients.produce(producer, self._topic, str(self.produced[key]).encode(), key.encode(),
                            on_delivery=lambda error, _: error is None or self.failed.append(error))
            self.produced[key] += 1
            sequence += 1
            producer.poll(0)
        assert producer.flush(180) == 0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(200)


def processed(path: Path) -> dict[str, list[int]]:
    """Per key, the values one process processed, in its order."""
    seen: dict[str, list[int]] = defaultdict(list)
    for line in path.read_text().splitlines() if path.exists() else []:
        key, value = line.split()
        seen[key].append(int(value))
    return seen


class TasksRun:
    """The two subscription processes and their input, for as long as a module's scenarios run."""

    def __init__(self, topology: Topology, tmp_path: Path) -> None:
        self.topology = topology
        self.bootstrap = topology.bootstrap
        self.topic = create_topic(self.bootstrap, PARTITIONS, "faults-tasks")
        self.group = unique("faults-tasks")
        self.outputs = [tmp_path / f"processed-{i}.txt" for i in range(2)]
        self.members = [subprocess.Popen(topology.host(f"tasks-{i}").command(
            [sys.executable, str(PROCESSOR), self.bootstrap, self.topic, self.group, str(self.outputs[i])]))
            for i in range(2)]
        self.feeder = Feeder(self.bootstrap, self.topic)

    def wait_until_processing(self) -> None:
        assert wait_for(lambda: all(processed(o) for o in self.outputs), 120, 0.5), "a member got nothing"

    def coordinator(self) -> int:
        """The Kafka node coordinating the subscription's group."""
        return self.topology.kafka.group_coordinator(self.group)

    def ends(self) -> dict[int, int]:
        """The partitions' end offsets, asked again while a moved leadership is not known yet (a new
        consumer's metadata may still lack it: UNKNOWN_PARTITION, found at load 80 right after a heal)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return end_offsets(self.bootstrap, self.topic, PARTITIONS)
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def caught_up_condition(self) -> Callable[[], bool]:
        """A condition that holds once every record written by now is committed."""
        ends = self.ends()
        return lambda: self.committed_up_to(ends)

    def committed_up_to(self, ends: dict[int, int]) -> bool:
        """Every partition committed at least up to ``ends`` (False while a moved coordinator is unknown)."""
        with contextlib.suppress(KafkaException):
            committed = committed_offsets(self.bootstrap, self.group, self.topic, PARTITIONS)
            return all(committed[p] >= end for p, end in ends.items())
        return False

    def close(self) -> None:
        """Input stops; once every record is committed the members stop (SIGTERM: drain, commit)."""
        try:
            self.feeder.stop()
            assert wait_for(self.caught_up_condition(), 120, 0.5), "not committed to the end"
        finally:
            for member in self.members:
                member.send_signal(signal.SIGTERM)
            for member in self.members:
                member.wait(60)

    def check(self) -> tuple[int, int]:
        """Nothing lost, each key in the log's order per member, repeats only as replays; returns how
        many records were produced and how many processed again."""
        assert not self.feeder.failed, self.feeder.failed[:3]
        by_member = [processed(o) for o in self.outputs]
        for key, count in self.feeder.produced.items():
            done = set(by_member[0].get(key, [])) | set(by_member[1].get(key, []))
            assert done >= set(range(count)), f"{key}: lost {sorted(set(range(count)) - done)[:10]}"
        for member, seen in enumerate(by_member):
            other = by_member[1 - member]
            for key, values in seen.items():
                for before, after in itertools.pairwise(values):
                    # in order; back to an earlier record only as a replay; ahead only over records the
                    # other member processed (the partition was elsewhere meanwhile)
                    assert after == before + 1 or after <= before or set(range(before + 1, after)) <= set(
                        other.get(key, [])), f"member {member}, {key}: {before} then {after}"
        total = sum(self.feeder.produced.values())
        return total, sum(len(v) for seen in by_member for v in seen.values()) - total


def cut_from_its_group_coordinator(run: TasksRun) -> None:
    """tasks-0 reaches every Kafka node but the one coordinating its group: held longer than its session
    timeout (``tasks_processor.SESSION_TIMEOUT_MS``), the coordinator expels it and gives its partitions
    to tasks-1 while tasks-0 goes on processing what it fetched (a zombie member; its commits fail)."""
    topology = run.topology
    topology.network.partition(topology.host("tasks-0"), topology.host(f"kafka-{run.coordinator()}"))
