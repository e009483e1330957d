"""strom.tasks subscriptions as a Kafka client: on strom broker and on the 3-node Apache Kafka cluster
(replication factor 3, min.insync.replicas 2), under the classic group protocol (eager and
cooperative-sticky) and KIP-848's consumer protocol, through a rolling restart of every Kafka node and
the SIGKILL of the group coordinator's node."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import KafkaError

from strom.errors import ConfigError
from strom.kafka import clients
from strom.tasks import ProcessorsBuilder, RetryConfig, SubscriptionBuilder, SubscriptionState
from strom.tasks.protocol import metadata_header
from support.apache_kafka import KafkaCluster
from support.kafka import committed_offsets, create_topic, end_offsets, produce, read_topic, unique, wait_for

pytestmark = pytest.mark.slow

# A first group on a fresh cluster waits for __consumer_offsets (50 partitions, RF 3) to be created and
# loaded; group.initial.rebalance.delay.ms (3 s) delays every new classic group.
JOIN_TIMEOUT_S = 120


def _subscription(bootstrap: str, topic: str, process, group: str, consumer: dict | None = None,
                  props: dict | None = None, retry: RetryConfig | None = None, states: list | None = None):
    builder = (SubscriptionBuilder.new_builder(group)
               .processors_builder(ProcessorsBuilder.consuming(topic, int).then_process(process))
               .properties({"decaton.commit.interval.ms": 100, **(props or {})})
               .consumer_config({"bootstrap.servers": bootstrap, **(consumer or {})}))
    if retry is not None:
        builder.enable_retry(retry)
    if states is not None:
        builder.state_listener(states.append)
    return builder.build_and_start()


def _records(n: int, keys: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i % keys}".encode(), str(i).encode()) for i in range(n)]


def _recorder():
    seen: dict[bytes, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def process(context, task: int) -> None:
        with lock:
            seen[context.key()].append(task)
    return seen, process


def _replicas(cluster: KafkaCluster) -> int:
    return 3 if isinstance(cluster, KafkaCluster) else 1


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_concurrent_processing_keeps_key_order_and_the_sliding_commit_reaches_the_end(
        kafka_cluster: KafkaCluster, protocol: str) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, 3)
    n = produce(bootstrap, topic, _records(900, 30))
    seen, record = _recorder()

    def process(context, task: int) -> None:
        time.sleep((task % 7) / 2000)  # completions come out of order within a partition
        record(context, task)

    group = unique(f"order-{protocol}")
    sub = _subscription(bootstrap, topic, process, group, {"group.protocol": protocol},
                        {"decaton.partition.concurrency": 8})
    try:
        assert wait_for(lambda: sum(map(len, seen.values())) >= n, JOIN_TIMEOUT_S)
        ends = end_offsets(bootstrap, topic, 3)
        # the out-of-order completions are committed up to the first incomplete one, while running
        assert wait_for(lambda: committed_offsets(bootstrap, group, topic, 3) == ends, 30, 0.2)
    finally:
        sub.close()
    assert sorted(v for values in seen.values() for v in values) == list(range(n))
    assert all(values == sorted(values) for values in seen.values())
    admin = kafka_cluster.admin()  # referenced while its future is pending
    description = admin.describe_consumer_groups([group], request_timeout=30)[group].result(60)
    assert description.type.name.lower() == protocol


@pytest.mark.parametrize("incremental", [{"group.protocol": "consumer"},
                                         {"partition.assignment.strategy": "cooperative-sticky"}],
                         ids=["consumer-protocol", "cooperative-sticky"])
def test_a_second_member_takes_partitions_incrementally(kafka_cluster: KafkaCluster,
                                                        incremental: dict) -> None:
    """KIP-848's protocol and the classic one's cooperative-sticky assignor move partitions one by one
    (incremental assignment): each member keeps what it holds and the revoked partitions are drained and
    committed before the other member starts on them."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, 4)
    n = produce(bootstrap, topic, _records(6400, 60))  # the first member alone needs 32 s: a hand-over takes
    # up to three 5 s heartbeats (revoke, drain and commit, assign), more on a loaded machine
    processed: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def processor(member: str):
        def process(context, task: int) -> None:
            time.sleep(0.02)
            with lock:
                processed[member].append(task)
        return process

    group = unique("incremental")
    consumer = incremental
    # the broker's heartbeat interval (5 s) paces the hand-over; few pending records drain quickly
    props = {"decaton.partition.concurrency": 1, "decaton.max.pending.records": 40}
    states: list[SubscriptionState] = []
    first = _subscription(bootstrap, topic, processor("first"), group, consumer, props, states=states)
    second = None
    try:
        assert wait_for(lambda: len(processed["first"]) >= 100, JOIN_TIMEOUT_S)
        second = _subscription(bootstrap, topic, processor("second"), group, consumer, props)
        assert wait_for(lambda: len(set(processed["first"]) | set(processed["second"])) >= n, 120)
        ends = end_offsets(bootstrap, topic, 4)
        assert wait_for(lambda: committed_offsets(bootstrap, group, topic, 4) == ends, 30, 0.2)
    finally:
        first.close()
        if second is not None:
            second.close()
    assert processed["second"], "the second member got partitions"
    assert SubscriptionState.REBALANCING in states
    assert sorted(processed["first"] + processed["second"]) == list(range(n))  # nothing ran twice


def test_retry_topic_and_dead_letter_topic_are_replicated(any_broker) -> None:
    bootstrap = any_broker.bootstrap_servers
    topic = create_topic(bootstrap, 2)
    produce(bootstrap, topic, [(b"order-1", b"42", 0), (b"order-2", b"7", 1)])
    attempts: dict[int, list[int]] = defaultdict(list)

    def process(context, task: int) -> None:
        attempts[task].append(context.metadata().retry_count)
        if task == 42:
            context.retry()

    group = unique("retry")
    sub = _subscription(bootstrap, topic, process, group, props={"strom.retry.max.attempts": 2},
                        retry=RetryConfig.with_backoff(200))
    try:
        dead = read_topic(bootstrap, f"{topic}-dlq", expected=1, timeout=JOIN_TIMEOUT_S)
        assert wait_for(lambda: committed_offsets(bootstrap, group, topic, 2) == {0: 1, 1: 1}, 30, 0.2)
    finally:
        sub.close()
    assert attempts[42] == [0, 1, 2] and attempts[7] == [0]
    assert [(r.key(), r.value()) for r in dead] == [(b"order-1", b"42")]
    assert metadata_header(dead[0].headers()).retry_count == 2
    metadata = clients.admin(bootstrap).list_topics(timeout=10).topics
    for created in (f"{topic}-retry", f"{topic}-dlq"):  # replication.factor -1: the broker's default
        assert {len(p.replicas) for p in metadata[created].partitions.values()} == {_replicas(any_broker)}
    assert len(metadata[f"{topic}-retry"].partitions) == 2


def test_the_consumer_protocol_on_a_broker_without_it_is_one_clear_error(broker) -> None:
    """strom broker speaks the classic group protocol only (KIP-848 needs Apache Kafka 4.0+)."""
    topic = create_topic(broker.bootstrap_servers, 1)
    with pytest.raises(ConfigError, match=r"group.protocol=consumer \(KIP-848\) needs a broker .* Remove"):
        _subscription(broker.bootstrap_servers, topic, lambda context, task: None, unique("no848"),
                      {"group.protocol": "consumer"})


def _fully_replicated(cluster: KafkaCluster, topics: list[str]) -> bool:
    metadata = cluster.admin().list_topics(timeout=10)
    return all(len(p.isrs) == 3 for t in topics for p in metadata.topics[t].partitions.values())


def _processed(seen: dict[bytes, list[int]]) -> int:
    return sum(map(len, seen.values()))


def _at_least_once_through(kafka_cluster: KafkaCluster, protocol: str, fault) -> None:
    """Runs a subscription (12 keys, 3 partitions) while input keeps arriving and ``fault(group, seen)``
    disrupts the cluster, then checks at-least-once: every record processed, in the log's order per key,
    going back only to replay from a committed position (after a rebalance)."""
    bootstrap = kafka_cluster.bootstrap_servers
    topic = create_topic(bootstrap, 3)
    keys = 12
    seen, process = _recorder()
    produced: dict[bytes, int] = defaultdict(int)
    failed: list[KafkaError] = []
    stop = threading.Event()

    def feed() -> None:
        producer = clients.producer(bootstrap)
        sequence = 0
        while not stop.is_set():
            key = f"k{sequence % keys}".encode()
            clients.produce(producer, topic, str(produced[key]).encode(), key,
                            on_delivery=lambda err, _msg: err is not None and failed.append(err))
            produced[key] += 1
            sequence += 1
            producer.poll(0.01)
        assert producer.flush(120) == 0

    group = unique(f"faults-{protocol}")
    states: list[SubscriptionState] = []
    sub = _subscription(bootstrap, topic, process, group, {"group.protocol": protocol}, states=states)
    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        assert wait_for(lambda: len(seen) == keys, JOIN_TIMEOUT_S), "the subscription never got going"
        fault(group, seen, topic)
    finally:
        stop.set()
        feeder.join(180)
        for node in range(3):
            if node not in kafka_cluster.alive():
                kafka_cluster.start_node(node)
    try:
        assert not failed, failed[:3]
        total = sum(produced.values())
        assert wait_for(lambda: all(set(seen[k]) >= set(range(produced[k])) for k in produced), 120)
        ends = end_offsets(bootstrap, topic, 3)
        assert wait_for(lambda: committed_offsets(bootstrap, group, topic, 3) == ends, 60, 0.2)
    finally:
        sub.close()
    logged: dict[bytes, list[int]] = defaultdict(list)
    for record in read_topic(bootstrap, topic, expected=sum(ends.values())):
        logged[record.key()].append(int(record.value()))
    for key, values in logged.items():  # the log holds every record, in order per key
        assert list(dict.fromkeys(values)) == list(range(produced[key])), key
    # librdkafka's idempotent producer may write a batch twice when its partition's leader moves (seen:
    # 3 of 15,269 records); the subscription then processes both copies
    in_log = sum(map(len, logged.values()))
    print(f"{total} records produced, {in_log} in the log, {_processed(seen)} processed")
    for key, values in seen.items():
        # in the log's order of the key, going back only to replay from an earlier (committed) position
        log, position = logged[key], 0
        for value in values:
            if position < len(log) and log[position] == value:
                position += 1
                continue
            earlier = [i for i in range(position) if log[i] == value]
            assert earlier, (key, value, position)
            position = earlier[-1] + 1
        assert position == len(log), (key, position, len(log))
    replays = _processed(seen) - in_log  # processed again from a committed position
    assert replays == 0 or SubscriptionState.REBALANCING in states, replays


@pytest.mark.timeout(600)  # three clean stops and starts of a JVM, each waited out until fully replicated
def test_rolling_restart_of_every_node_loses_nothing_and_keeps_key_order(kafka_cluster: KafkaCluster) -> None:
    """Each node in turn stops cleanly and starts again (waiting until every partition is fully
    replicated, as an operator's rolling restart does) while input keeps arriving: partition leaders
    and the group coordinator move. Every record is processed, in key order; a record is processed
    again only after its partition moved or a commit was lost (at-least-once). Run with the consumer
    protocol (KIP-848), whose group coordinator keeps the assignment itself; the classic protocol gets
    the harsher fault below (its coordinator SIGKILLed), so each protocol loses a coordinator once."""

    def restart_each_node(_group: str, seen: dict[bytes, list[int]], topic: str) -> None:
        for node in range(3):
            before = _processed(seen)
            kafka_cluster.restart(node)
            assert wait_for(lambda: _fully_replicated(kafka_cluster, [topic, "__consumer_offsets"]), 120, 0.5)
            assert wait_for(lambda before=before: _processed(seen) > before + 50, 60), \
                f"processing stalled after restarting node {node}"

    _at_least_once_through(kafka_cluster, "consumer", restart_each_node)


@pytest.mark.timeout(600)
def test_the_group_coordinators_node_killed_loses_nothing_and_keeps_key_order(
        kafka_cluster: KafkaCluster) -> None:
    """The node coordinating the subscription's group is SIGKILLed while input keeps arriving: the
    group moves to the node that takes over its __consumer_offsets partition, processing goes on while
    the node is down, and nothing is lost (at-least-once, key order kept); then the node comes back."""

    def kill_the_group_coordinator(group: str, seen: dict[bytes, list[int]], topic: str) -> None:
        coordinator = kafka_cluster.group_coordinator(group)
        kafka_cluster.kill(coordinator)
        before = _processed(seen)
        assert wait_for(lambda: _processed(seen) > before + 200, 90), "processing stalled with the node down"
        assert wait_for(lambda: kafka_cluster.group_coordinator(group) != coordinator, 60, 0.5)
        kafka_cluster.start_node(coordinator)
        assert wait_for(lambda: _fully_replicated(kafka_cluster, [topic, "__consumer_offsets"]), 120, 0.5)

    _at_least_once_through(kafka_cluster, "classic", kill_the_group_coordinator)
