"""The topology the network-fault scenarios run (issue 39), every component on a host of its own:

    kafka-0, kafka-1, kafka-2     a 3-node Apache Kafka cluster (replication 3, min.insync.replicas 2);
                                  one node coordinates every transaction and leads the word count's input
    master, worker-0, worker-1    a Spark standalone cluster, one executor (one core) per worker
    driver                        spark-submit of tests/spark/runtime/wordcount.py (through
                                  word_count_driver.py, submitted while Kafka starts): the word count with a
                                  repartition step and a RocksDB store, exactly_once_v2, strom's defaults

The test process itself sits on the bridge (``network.gateway``): it writes the input at a steady rate
and reads the output read_committed. ``WordCountRun.scenario`` runs one scenario on the running
application: input flows, the scenario's fault is made and healed, and the time from the heal until
every input and repartition record is committed is measured; then every count must be exact and no
update written twice, over everything written since the application started.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from spark.runtime.cluster_wordcount import DEFAULTS, WordCountDriver, assert_counted_once, committed
from spark.runtime.conftest import read_updates
from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from support.apache_kafka import FIRST_JIT_TIER, KafkaCluster
from support.hosts import Host, Network
from support.spark_cluster import SparkCluster

DRIVER = Path(__file__).with_name("word_count_driver.py")
WORKERS = 2
LINES_PER_SECOND = 20
START_S = 420.0
"""How long the word count may take to start: submitted until every partition committed (about 2.5 min
at load 30; more than 4 at load 77-135, where the 240 s a scenario allowed ran out). No scenario is about
the start: the bound only tells a start that hangs from a slow one, within a test's 600 s."""
TRANSACTION_TIMEOUT_S = 60.0
"""strom's ``transaction.timeout.ms`` (librdkafka's default): a transaction still open this long is aborted
by its coordinator."""
GATE_S = 120.0
"""How long a scenario waits, before its fault, for every partition to commit: the application caught up
after the scenario before, so this is a batch's commit interval, or a batch restart after a fault that
ended one (15-26 s at load 20-40), with room for load."""
JIT = FIRST_JIT_TIER
"""Every JVM of the topology (the Kafka nodes, as every test cluster's, Spark's master, workers, driver and
executors) compiles with C1 only, as strom's own local drivers do (``strom.spark.local_session.LOCAL_JIT``):
on two shared cores their start is mostly compiling, and this traffic (tens of records a second) never
needs C2's code."""
CLEANUP = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000}
"""Brokers abort a timed-out transaction within a second (Kafka's default: 10 s), for scenario 8."""
INTERNAL_TOPICS = {"offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 1}
"""The cluster's internal topics: ``__consumer_offsets`` with a partition a node, ``__transaction_state``
with one, so that one node coordinates every transaction (scenario 3 cuts that node off; it leads the
word count's input too). Kafka's defaults, 50 partitions each, are 300 replicas that the cluster creates,
loads and replicates on the two shared cores while the word count starts."""
TRANSACTION_STATE = TopicPartition("__transaction_state", 0)


class Driver(WordCountDriver):
    """The word count's driver, whose committed offsets are asked again while the group's coordinator
    moves (a fault moves leaderships; a healed node takes its preferred ones back later): librdkafka
    answers NOT_COORDINATOR or times out meanwhile."""

    def committed(self) -> dict[tuple[str, int], int]:
        deadline = time.monotonic() + 30
        while True:
            try:
                return super().committed()
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


@dataclass
class Topology:
    network: Network
    kafka: KafkaCluster
    spark: SparkCluster
    kafka_started: Future

    @property
    def bootstrap(self) -> str:
        """The Kafka cluster's bootstrap servers, once it serves (it starts beside Spark and the word
        count's driver: ``running_topology``)."""
        self.kafka_started.result()
        return self.kafka.bootstrap_servers

    def host(self, name: str) -> Host:
        """Host ``name``, made on first use (the Kafka nodes and Spark's processes have theirs)."""
        return self.network.hosts.get(name) or self.network.host(name)

    def transaction_coordinator(self) -> int:
        """The node that coordinates every transaction while the preferred leader of
        ``__transaction_state``'s one partition leads it (``INTERNAL_TOPICS``): its first replica."""
        self.kafka_started.result()
        name = TRANSACTION_STATE.topic
        return self.kafka.admin().list_topics(name, timeout=10).topics[name].partitions[0].replicas[0]

    def leaders(self, partitions: list[TopicPartition], seen_by: int) -> list[int]:
        """Each partition's leader as node ``seen_by`` knows it (-1: not known there). A node cut off from
        the other two goes on believing it leads what the others moved away from it."""
        address = f"{self.kafka.addresses[seen_by]}:{self.kafka.ports[seen_by]}"
        with contextlib.suppress(KafkaException):
            topics = clients.admin(address).list_topics(timeout=5).topics
            return [found.partitions[tp.partition].leader
                    if (found := topics.get(tp.topic)) and tp.partition in found.partitions else -1
                    for tp in partitions]
        return [-1] * len(partitions)

    def lead(self, partitions: list[TopicPartition], node: int, timeout: float) -> None:
        """Waits until every node knows ``node`` as the leader of ``partitions``, of which it is the
        preferred leader: elected back (a fault moved its leaderships; Kafka's own rebalance of
        preferred leaders waits 5 minutes)."""
        deadline = time.monotonic() + timeout
        while not all(self.leaders(partitions, seen_by) == [node] * len(partitions)
                      for seen_by in range(self.kafka.brokers)):
            assert time.monotonic() < deadline, \
                f"kafka-{node} does not lead {partitions}: {[self.leaders(partitions, n) for n in range(3)]}"
            admin = self.kafka.admin()  # kept while its future runs (a dropped client never answers)
            with contextlib.suppress(KafkaException, TimeoutError):  # not needed, the node not in sync yet
                admin.elect_leaders(ElectionType.PREFERRED, partitions).result(15)  # (confluent-kafka
                # 2.16 raises SystemError for its request_timeout)
            time.sleep(0.5)


@contextmanager
def running_topology(base_dir: Path) -> Iterator[Topology]:
    """Every host, the Kafka cluster and the Spark cluster, started once for the package's scenarios.
    It is there once Spark is (a driver may be submitted); Kafka goes on starting meanwhile, and
    ``Topology.bootstrap`` waits for it."""
    with Network() as network:
        kafka_hosts = [network.host(f"kafka-{i}") for i in range(3)]
        spark_hosts = {name: network.host(name) for name in ("master", "driver",
                                                             *(f"worker-{i}" for i in range(WORKERS)))}
        kafka = KafkaCluster(base_dir / "kafka", brokers=3, config={**CLEANUP, **INTERNAL_TOPICS},
                             hosts=kafka_hosts)
        spark = SparkCluster(base_dir / "spark", workers=WORKERS, hosts=spark_hosts, java_options=JIT)
        with ThreadPoolExecutor(1) as starting:  # the JVMs start side by side (each mostly waits)
            kafka_started = starting.submit(kafka.start)
            try:
                spark.start()
                yield Topology(network, kafka, spark, kafka_started)
            finally:
                with contextlib.suppress(Exception):  # a start that failed stopped its nodes itself
                    kafka_started.result()
                kafka.stop()
                spark.stop()
        network.heal()
        deadline = time.monotonic() + 15
        while (left := network.left_behind()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"processes left behind on the hosts once everything stopped: {left}"


def settled_at(bootstrap: str, topic: str, partitions: int, timeout: float) -> float:
    """When no transaction was open on ``topic`` any more: each partition's last stable offset at its high
    watermark (every commit or abort marker written). A transaction's consumer offsets may be visible
    before the markers in its output partitions are."""
    committed = clients.consumer(bootstrap, **{"isolation.level": "read_committed"})
    uncommitted = clients.consumer(bootstrap, **{"isolation.level": "read_uncommitted"})
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(KafkaException):  # a leadership that moved: asked again
                if all(committed.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                       == uncommitted.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                       for p in range(partitions)):
                    return time.monotonic()
            time.sleep(0.2)
        raise AssertionError(f"a transaction on {topic} still open after {timeout:.0f} s")
    finally:
        committed.close()
        uncommitted.close()


class WordCountRun:
    """One word count application on the topology, shared by a module's scenarios (its start costs
    half a minute): each scenario lets input flow, makes its fault, heals, and checks the output
    read_committed against everything written so far."""

    def __init__(self, topology: Topology, tmp_path: Path) -> None:
        self.topology = topology
        suffix = uuid.uuid4().hex[:8]
        self.names = {"lines": f"faults-lines-{suffix}", "counts": f"faults-counts-{suffix}"}
        self.app_id = f"faults-{suffix}"
        self.written: list[tuple[str, str]] = []
        self._rng = random.Random(39)
        self._keys = itertools.count()
        # submitted before Kafka serves: the driver's and executors' start overlaps Kafka's
        self.driver = Driver(topology.spark, topology.kafka.bootstrap_servers, self.names, tmp_path,
                             self.app_id, "realtime", DEFAULTS, cores_max=WORKERS, app=DRIVER)
        self._submitted = time.monotonic()
        try:
            self.input_leader = topology.transaction_coordinator()
            self._create_topics()
        except BaseException:
            self.driver.kill()  # not left behind on its host
            raise
        self._starting = ThreadPoolExecutor(1, thread_name_prefix="word-count-start")
        self._started = self._starting.submit(self._until_started)  # overlaps scenario 8
        self._starting.shutdown(wait=False)

    def _create_topics(self) -> None:
        """The output, and the input led by the node that coordinates every transaction."""
        others = [node for node in range(self.topology.kafka.brokers) if node != self.input_leader]
        admin = clients.admin(self.topology.bootstrap)
        lines = NewTopic(self.names["lines"], num_partitions=2, replica_assignment=[
            [self.input_leader, *others], [self.input_leader, *others[::-1]]])
        admin.create_topics([lines])[lines.topic].result(60)
        clients.create_topics(self.topology.bootstrap, {self.names["counts"]: 2})
        self.topology.lead(self.input_partitions(), self.input_leader, 60)

    def input_partitions(self) -> list[TopicPartition]:
        """The input's partitions and ``__transaction_state``'s, all led by ``input_leader`` unless a fault
        moved them."""
        return [TopicPartition(self.names["lines"], p) for p in range(2)] + [TRANSACTION_STATE]

    def _until_started(self) -> None:
        """Input flowing from the topics' creation until every partition committed: the application's
        start, in a thread of its own while the tests that do not need the application run."""
        with self.input_flowing():
            self.driver.all_committing(START_S - (time.monotonic() - self._submitted))
        print(f"the word count started {time.monotonic() - self._submitted:.1f} s after its submission")

    def wait_started(self) -> None:
        """Waits until the application runs (raises what its start raised)."""
        self._started.result()

    def close(self) -> None:
        """Lets the application catch up and exit cleanly (SIGKILLs it if it does not)."""
        try:
            self.wait_started()  # every line of its start acknowledged
            self.driver.finish()
        finally:
            self.driver.kill()

    @contextmanager
    def input_flowing(self) -> Iterator[None]:
        """Lines written at ``LINES_PER_SECOND`` in a thread of its own while the block runs; a line
        counts as written once Kafka acknowledged it (none may fail)."""
        producer = clients.producer(self.topology.bootstrap, **JAVA_PARTITIONER)
        failed: list[object] = []
        stop = threading.Event()

        def delivered(line: tuple[str, str]) -> Callable[[object, object], None]:
            return lambda error, _: failed.append(error) if error else self.written.append(line)

        def write() -> None:
            words = [f"w{i}" for i in range(20)]
            while not stop.wait(0.25):
                for _ in range(LINES_PER_SECOND // 4):
                    text = " ".join(self._rng.choices(words, k=self._rng.randint(1, 4)))
                    line = (f"k{next(self._keys)}", text)
                    clients.produce(producer, self.names["lines"], line[1].encode(), line[0].encode(),
                                    on_delivery=delivered(line))
                producer.poll(0)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            yield
        finally:
            stop.set()
            writer.join()
            remaining = producer.flush(180)
        assert remaining == 0 and not failed, f"{remaining} lines unacknowledged, failed: {failed[:3]}"

    def _miscounted(self) -> str:
        """What the output read_committed says wrong: each word's updates where they differ from the input."""
        expected = Counter(word for _, line in self.written for word in line.split())
        updates = read_updates(self.topology.bootstrap, self.names["counts"])
        wrong = {word: (updates.get(word, [])[-3:], count) for word, count in expected.items()
                 if updates.get(word, [None])[-1] != count or updates[word] != sorted(set(updates[word]))}
        return f"last updates and expected count of each word counted wrong or twice: {wrong}"

    def driver_warnings(self) -> list[str]:
        """What the driver said about the batches it ended early or cut short, in order."""
        text = self.driver.log_path.read_text(errors="replace") if self.driver.log_path.exists() else ""
        return [line for line in text.splitlines()
                if "ending the batch early" in line or "cancelling what is left" in line]

    def caught_up(self) -> bool:
        """Every input and repartition record committed: each partition's committed offset at its high
        watermark, past every transaction's records and markers (False while a moved leader's metadata
        is stale). Not the end offset a read_committed consumer sees: that stops at the first open
        transaction, where the repartition topic's consumer stands too, and a committed transaction's
        offsets can be visible before its markers on the repartition topic are ("driver isolated 30 s"
        then read counts short of the input, which the next scenario found exact)."""
        ends = clients.consumer(self.topology.bootstrap, **{"isolation.level": "read_uncommitted"})
        try:
            watermarks = {tp: ends.get_watermark_offsets(TopicPartition(*tp), 10)[1]
                          for tp in self.driver.partitions}
            return committed(self.topology.bootstrap, self.app_id, self.driver.partitions) == watermarks
        except KafkaException:
            return False
        finally:
            ends.close()

    def scenario(self, name: str, fault: Callable[[WordCountDriver], None], catch_up_s: float = 60.0,
                 also: Mapping[str, Callable[[], Callable[[], bool]]] | None = None) -> float:
        """Input flows; once every partition commits, ``fault`` is made (it heals before it returns);
        input flows 3 s more. Returns the seconds from the heal until every input and repartition record
        was committed, after checking every count read_committed. ``also``: other applications on the
        topology, each a function called at the heal that returns the condition of its catching up
        with what was written by then; their recovery is measured and bounded the same way."""
        recovered: dict[str, float] = {}

        def caught_up(waits: Mapping[str, Callable[[], bool]]) -> bool:
            for what, done in waits.items():
                if what not in recovered and done():
                    recovered[what] = time.monotonic() - healed
            return all(what in recovered for what in waits)

        self.wait_started()
        with self.input_flowing():
            gated_s = self.driver.all_committing(GATE_S)
            logged = len(self.driver_warnings())
            faulted = time.monotonic()
            fault(self.driver)
            healed = time.monotonic()
            others = {other: condition() for other, condition in (also or {}).items()}
            while time.monotonic() - healed < 3:  # the others' recovery is measured meanwhile
                caught_up(others)
                time.sleep(0.25)
        self.driver.wait_until(lambda: caught_up({"word count": self.caught_up, **others}), catch_up_s + 120,
                               f"caught up after {name}")
        # every input committed; the last transactions' markers in the output may still be on their way
        settled = settled_at(self.topology.bootstrap, self.names["counts"], 2, TRANSACTION_TIMEOUT_S)
        try:
            assert_counted_once(self.topology.bootstrap, self.names["counts"], self.written)
        except AssertionError:
            raise AssertionError(f"{name}: {self._miscounted()}") from None
        figures = ", ".join(f"{what} {seconds:.1f} s" for what, seconds in recovered.items())
        print(f"{name}: caught up after the heal: {figures}, output settled "
              f"{settled - healed - recovered['word count']:.1f} s later ({len(self.written)} lines so far; "
              f"gate {gated_s:.1f} s, fault {healed - faulted:.1f} s, counts read "
              f"{time.monotonic() - settled:.1f} s)", *self.driver_warnings()[logged:], sep="\n  ")
        slow = {what: seconds for what, seconds in recovered.items() if seconds > catch_up_s}
        assert not slow, f"{name}: caught up later than {catch_up_s:.0f} s after the heal: {slow}"
        return recovered["word count"]
