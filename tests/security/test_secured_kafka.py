"""strom's clients on a secured 3-node Apache Kafka cluster (clients on SASL_SSL with SCRAM-SHA-512;
replication and the KRaft quorum over mutual TLS as the nodes' own super-user principal;
StandardAuthorizer, allow.everyone.if.no.acl.found=false; topics, internal ones included, replicated 3
times, min.insync.replicas 2), each principal holding only the ACLs docs/deploy.md lists.

- A strom.tasks subscription with retries (its retry and dead letter topics created by strom) runs with
  its list; without one line it stops at once with one AuthorizationError naming what is missing.
- A SparkStreams application under exactly_once_v2 (a repartition topic and a changelog strom creates),
  in real-time mode and then in micro-batch mode, runs with its list and counts exactly; then, on the
  same Spark session, a Spark SQL query through the connector (format("strom"): source and exactly-once
  sink) copies a topic with only the connector's list.
- Each line of the application's list is necessary. Checked at the client layer, not by one application
  start per line (each costs a Spark job): a principal holding every line but one makes the calls the
  application makes through strom.kafka (topic listing, internal topic creation, the transactional
  producer's init, the group's committed offsets and fetch, a micro-batch source's assigning reader,
  produce, send-offsets and commit), and
  the first refused call must raise an AuthorizationError naming the principal, the resource and the
  operation, in seconds. tests/security/test_acl_list.py shows on strom broker that an application
  surfaces such an error from these calls (a TransactionalId or internal-topic line missing)."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from security.conftest import PASSWORDS
from spark.runtime.wordcount import word_count
from strom.kafka import clients
from strom.kafka.reading import fetch_committed
from strom.kafka.security import AuthorizationError, refusal
from strom.kafka.transactional import TransactionalProducer
from strom.spark.connector.metadata import TopicMetadata
from strom.spark.connector.options import sink_options, source_options
from strom.spark.connector.sink import TaskIdentity, write_partition
from strom.tasks import ProcessorsBuilder, RetryConfig, SubscriptionBuilder
from support.apache_kafka import KafkaCluster, KafkaSecurity
from support.kafka import read_partition, unique, wait_for
from support.processes import STROM
from support.secured_clients import (
    GROUP,
    OP,
    PREFIXED,
    TOPIC,
    TXN,
    ClusterAdmin,
    add_user,
    application_acls,
    connector_acls,
    connector_copy,
    each,
    grant,
    latest_counts,
    subscription_acls,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
REFUSED_WITHIN_S = 30  # one answer of the broker, not a retry loop until some timeout


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path_factory.mktemp("secured-kafka"), brokers=3,
                      security=KafkaSecurity(pki, PASSWORDS)) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def admin(kafka: KafkaCluster) -> ClusterAdmin:
    return ClusterAdmin({"bootstrap.servers": kafka.bootstrap_servers, **kafka.admin_settings})


def principal(kafka: KafkaCluster, admin: AdminClient, prefix: str) -> dict[str, str]:
    """Client settings of a new SCRAM user (no ACLs yet)."""
    user = unique(prefix)
    add_user(admin, user, f"{user}-pw")
    return {"bootstrap.servers": kafka.bootstrap_servers, **kafka.admin_settings, "sasl.username": user,
            "sasl.password": f"{user}-pw"}


def topics(admin: AdminClient, *names: str, partitions: int = 2) -> None:
    for future in admin.create_topics([NewTopic(name, partitions) for name in names]).values():
        future.result()


def write(kafka: KafkaCluster, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, **kafka.admin_settings})
    for key, value in records:
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0


def refused_at_once(call: Callable[[], Any]) -> str:
    """The AuthorizationError `call` raises, within REFUSED_WITHIN_S."""
    started = time.monotonic()
    with pytest.raises(AuthorizationError) as refused:
        call()
    assert time.monotonic() - started < REFUSED_WITHIN_S
    return str(refused.value)


# ---- strom.tasks -------------------------------------------------------------------------------------
def subscription(settings: dict[str, str], sub_id: str, topic: str, process: Callable) -> SubscriptionBuilder:
    return (SubscriptionBuilder.new_builder(sub_id)
            .processors_builder(ProcessorsBuilder.consuming(topic, int).then_process(process))
            .properties({"decaton.commit.interval.ms": 100})
            .consumer_config(settings)
            .enable_retry(RetryConfig.with_backoff(100)))


def test_a_subscription_with_retries_runs_with_its_documented_acls(kafka, admin):
    topic, sub_id = unique("mail"), unique("mailer")
    topics(admin, topic)
    write(kafka, topic, [(f"k{i % 5}".encode(), str(i).encode()) for i in range(20)])
    settings = principal(kafka, admin, "tasks")
    grant(admin, *(b for line in subscription_acls(f"User:{settings['sasl.username']}", sub_id,
                                                   topic).values() for b in line))
    done: list[int] = []

    def process(context, task: int) -> None:
        if task % 2 == 0 and context.metadata().retry_count == 0:
            context.retry()  # through <topic>-retry, which strom created as this principal
        else:
            done.append(task)

    sub = subscription(settings, sub_id, topic, process).build_and_start()
    try:
        assert wait_for(lambda: len(done) >= 20, 120), sorted(done)
    finally:
        sub.close()
    assert sorted(done) == list(range(20))


@pytest.mark.parametrize("missing", ["input topics", "group", "retry topics"])
def test_a_subscription_without_one_line_stops_with_one_clear_error(kafka, admin, missing):
    topic, sub_id = unique("mail"), unique("mailer")
    topics(admin, topic)
    write(kafka, topic, [(b"k", b"1")])
    settings = principal(kafka, admin, "tasks")
    who = f"User:{settings['sasl.username']}"
    grant(admin, *(b for line, bindings in subscription_acls(who, sub_id, topic).items() if line != missing
                   for b in bindings))

    def run() -> None:
        sub = subscription(settings, sub_id, topic, lambda context, task: None).build_and_start()
        assert wait_for(lambda: not sub.is_alive(), REFUSED_WITHIN_S), "the subscription kept running"
        sub.close()

    wanted = {"input topics": f"{who} may not Describe Topic '{topic}'",
              "group": f"{who} may not Read Group '{sub_id}'",
              "retry topics": f"{who} may not Create Topic '{topic}-"}[missing]
    assert wanted in refused_at_once(run)


# ---- a SparkStreams application ------------------------------------------------------------------------
@pytest.mark.spark
def test_the_documented_acls_run_exactly_once_applications_in_both_modes_and_the_connector(kafka, admin,
                                                                                           tmp_path):
    """One Spark session for the three (a session's start costs more than a query's)."""
    import strom.spark

    spark = strom.spark.session(app_name="strom-secured-kafka", log_level="ERROR")
    try:
        for mode in ("realtime", "microbatch"):
            count_words_as_the_documented_principal(kafka, admin, spark, mode, tmp_path / mode)
        copy_through_the_connector(kafka, admin, spark, tmp_path)
    finally:
        spark.stop()


def count_words_as_the_documented_principal(kafka: KafkaCluster, admin: AdminClient, spark: Any, mode: str,
                                            state_dir: Path) -> None:
    """A word count under exactly_once_v2 in ``mode`` (its repartition topic and changelog created by
    strom) as a principal holding only docs/deploy.md's application lines; the output counts exactly."""
    from strom.spark.runtime import SparkStreams

    lines, counts, app_id = unique("lines"), unique("counts"), unique("wc")
    topics(admin, lines, counts)
    text = [f"w{i % 7} w{i % 3}" for i in range(120)]
    write(kafka, lines, [(f"k{i}".encode(), line.encode()) for i, line in enumerate(text)])
    settings = principal(kafka, admin, "app")
    grant(admin, *(b for line in application_acls(f"User:{settings['sasl.username']}", app_id, [lines],
                                                  [counts]).values() for b in line))
    app = SparkStreams(word_count(lines, counts), {
        "application.id": app_id, "processing.guarantee": "exactly_once_v2", "state.dir": str(state_dir),
        "commit.interval.ms": 200, "execution.mode": mode, **settings,
        **({"realtime.batch.duration.ms": 5000} if mode == "realtime" else {})}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(300), f"{mode}: lag {app.lag()}"
    finally:
        app.stop()
    reader = {"bootstrap.servers": kafka.bootstrap_servers, **kafka.admin_settings}
    assert latest_counts(reader, counts) == Counter(word for line in text for word in line.split()), mode
    listed = admin.list_topics(timeout=10).topics
    internal = [listed[name] for name in listed if name.startswith(f"{app_id}-")
                or name in ("__consumer_offsets", "__transaction_state")]
    assert len(internal) == 4, sorted(listed)  # the repartition topic and changelog strom created
    assert {len(p.replicas) for topic in internal for p in topic.partitions.values()} == {3}


def copy_through_the_connector(kafka: KafkaCluster, admin: AdminClient, spark: Any, tmp_path: Path) -> None:
    """readStream.format("strom") -> writeStream exactly_once, availableNow, as a principal holding only
    docs/deploy.md's connector lines; read_committed, the copy holds each record once."""
    source, sink = unique("events"), unique("copies")
    topics(admin, source, sink)
    values = [f"v{i}".encode() for i in range(40)]
    write(kafka, source, [(f"k{i}".encode(), value) for i, value in enumerate(values)])
    settings = principal(kafka, admin, "connector")
    grant(admin, *(b for line in connector_acls(f"User:{settings['sasl.username']}", source, sink).values()
                   for b in line))
    connector_copy(spark, settings, source, sink, tmp_path / "connector")
    copies = [m.value() for p in (0, 1)  # read_committed
              for m in read_partition(kafka.bootstrap_servers, sink, p, **kafka.admin_settings)]
    assert sorted(copies) == sorted(values)


def read_or_refused(reader: Consumer, settings: dict[str, str], topic: str, group: str) -> None:
    """Reads one record as strom's readers do (strom.kafka.reading): a batch's errors go through
    strom.kafka.security's refusal() before its records count, within REFUSED_WITHIN_S. The refused
    lookup of a reader's group coordinator can come in the same batch as the first record, after it
    (about 1 read in 60 on 3 nodes): taking that record first let a principal without the group's line
    read."""
    clients.assign(reader, [TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = time.monotonic() + REFUSED_WITHIN_S
    while time.monotonic() < deadline:
        messages = reader.consume(10, 0.5)
        for message in messages:
            if message.error() is not None and (
                    refused := refusal(settings, message.error(), topic=topic, group=group)) is not None:
                raise refused
        if any(message.error() is None for message in messages):
            return
    raise AssertionError(f"nothing read from {topic} and no refusal")


def write_or_refused(producer: TransactionalProducer, settings: dict[str, str], topic: str) -> None:
    """Writes one record in the transaction; a refused delivery as the producer's sink reports it."""
    errors: list[Any] = []
    clients.produce(producer.producer, topic, b"1", b"w", on_delivery=lambda error, _m: errors.append(error))
    producer.flush(REFUSED_WITHIN_S)
    if errors[0] is not None:
        raise refusal(settings, errors[0], topic=topic, topic_operation="Write") or AssertionError(errors)


def application_calls(settings: dict[str, str], app_id: str, lines: str, counts: str) -> None:
    """The calls a SparkStreams application makes as its principal, through strom.kafka, in its order:
    the planner lists the topics (a source it may not describe is named), strom creates an internal
    topic, a stream task inits its transactional producer, reads its committed offsets and its input in
    the group; a micro-batch source reads a range assigning partitions itself (no group of its own); the
    task writes the output and commits the input's offsets in the transaction. A consumer's refusal goes
    through strom.kafka.security's refusal() as a stream task's does."""
    bootstrap = settings["bootstrap.servers"]
    clients.check_described(clients.admin(bootstrap, **settings), [lines], settings)
    clients.create_topics(bootstrap, {f"{app_id}-words-repartition": 1}, settings=settings)
    producer = TransactionalProducer(bootstrap, f"{app_id}-0", "stream thread 0", **settings)
    producer.init_transactions()
    group_reader = clients.consumer(bootstrap, group_id=app_id, **settings)
    range_reader = clients.consumer(bootstrap, **settings)
    try:
        try:
            fetch_committed(group_reader, [TopicPartition(lines, 0)], REFUSED_WITHIN_S)
        except KafkaException as exc:
            raise refusal(settings, exc.args[0], group=app_id) or exc from None
        read_or_refused(group_reader, settings, lines, app_id)
        read_or_refused(range_reader, settings, lines, clients.UNUSED_GROUP)
        write_and_commit(producer, settings, counts, TopicPartition(lines, 0, 1), group_reader)
    finally:
        group_reader.close()
        range_reader.close()


def write_and_commit(producer: TransactionalProducer, settings: dict[str, str], topic: str,
                     offset: TopicPartition, group_reader: Consumer) -> None:
    """One transaction: a record written to ``topic``, ``offset`` committed for ``group_reader``'s group."""
    producer.begin_transaction()
    write_or_refused(producer, settings, topic)
    producer.send_offsets_to_transaction([offset], group_reader.consumer_group_metadata())
    producer.commit_transaction()


def each_line_is_necessary(kafka: KafkaCluster, admin: AdminClient, acls: Callable[[str], dict[str, list]],
                           calls: Callable[[dict[str, str]], None],
                           refusals: dict[str, tuple[str, str]]) -> None:
    """``calls`` succeed as a principal holding every line of ``acls(principal)``; without the line
    ``missing`` (each key of ``refusals``) the first refused call raises within seconds, naming the
    principal and the (operation, resource) ``refusals`` gives."""
    everyone = principal(kafka, admin, "all")
    grant(admin, *(b for line in acls(f"User:{everyone['sasl.username']}").values() for b in line))
    calls(everyone)
    for missing, (operation, resource) in refusals.items():
        settings = principal(kafka, admin, "less")
        who = f"User:{settings['sasl.username']}"
        grant(admin, *(b for line, bindings in acls(who).items() if line != missing for b in bindings))
        message = refused_at_once(lambda settings=settings: calls(settings))
        assert f"{who} may not {operation} {resource}" in message, (missing, message)


def test_each_line_of_the_application_list_is_necessary(kafka, admin):
    lines, counts, app_id = unique("lines"), unique("counts"), unique("wc")
    topics(admin, lines, counts, partitions=1)
    write(kafka, lines, [(b"k", b"a b")])
    each_line_is_necessary(
        kafka, admin, lambda who: application_acls(who, app_id, [lines], [counts]),
        lambda settings: application_calls(settings, app_id, lines, counts), {
            "input topics": ("Describe", f"Topic '{lines}'"),
            "output topics": ("Write", f"Topic '{counts}'"),
            "internal topics": ("Create", f"Topic '{app_id}-words-repartition'"),
            "group": ("Read", f"Group '{app_id}'"),
            "assigning readers' group": ("Read", f"Group '{clients.UNUSED_GROUP}'"),
            "transactional ids": ("Write", f"TransactionalId '{app_id}-0'")})


def connector_calls(settings: dict[str, str], source: str, sink: str, query: str) -> None:
    """What the Spark connector does as its principal, through its own code without Spark: the source
    resolves its subscription (TopicMetadata) and its assigning reader reads (a reader's refusal goes
    through strom.kafka.security's refusal() as the connector's does); an exactly-once sink task
    (write_partition: its transactional producer's init, its batch marker read from its marker group,
    the write and the marker committed in the transaction) writes one row."""
    bootstrap = settings["bootstrap.servers"]
    options = {"kafka.bootstrap.servers": bootstrap, **{f"kafka.{k}": v for k, v in settings.items()}}
    TopicMetadata(source_options({**options, "subscribe": source}, streaming=True)).topic_partitions()
    range_reader = clients.consumer(bootstrap, **settings)
    try:
        read_or_refused(range_reader, settings, source, clients.UNUSED_GROUP)
    finally:
        range_reader.close()
    row = pa.RecordBatch.from_pydict({"key": [b"k"], "value": [b"v"]})
    written = write_partition(sink_options({**options, "topic": sink, "delivery.guarantee": "exactly_once"},
                                           streaming=True), iter([row]), TaskIdentity(query, 0, 0))
    assert written.records == 1


def test_each_line_of_the_connector_list_is_necessary(kafka, admin):
    source, sink, query = unique("events"), unique("copies"), unique("q")
    topics(admin, source, sink, partitions=1)
    write(kafka, source, [(b"k", b"v")])
    each_line_is_necessary(
        kafka, admin, lambda who: connector_acls(who, source, sink),
        lambda settings: connector_calls(settings, source, sink, query), {
            "source topics": ("Describe", f"Topic '{source}'"),
            "assigning readers' group": ("Read", f"Group '{clients.UNUSED_GROUP}'"),
            "sink transactional ids": ("Write", f"TransactionalId 'strom-sink-{query}-0'"),
            "sink marker groups": ("Read", f"Group 'strom-sink-{query}-0'"),
            # the marker's TxnOffsetCommit (Read) is answered before the records' delivery (Write)
            "sink topics": ("Read", f"Topic '{sink}'")})


# ---- the CLI ----------------------------------------------------------------------------------------
def cli_acls(who: str, topic: str, group: str, app_id: str, txn: str) -> dict[str, list]:
    """docs/deploy.md's ACLs of the CLI's commands, by line of its table."""
    return {
        "topics": each(TOPIC, topic, who, (OP.CREATE, OP.DESCRIBE, OP.DESCRIBE_CONFIGS, OP.DELETE)),
        "produce": each(TOPIC, topic, who, (OP.WRITE,)),
        "consume": [*each(TOPIC, topic, who, (OP.READ,)),
                    *each(GROUP, clients.UNUSED_GROUP, who, (OP.DESCRIBE,))],
        "consume --group": [*each(TOPIC, topic, who, (OP.READ,)), *each(GROUP, group, who, (OP.READ,))],
        "groups": each(GROUP, group, who, (OP.DESCRIBE, OP.DELETE)),
        "groups reset-offsets": [*each(GROUP, group, who, (OP.READ,)), *each(TOPIC, topic, who, (OP.READ,))],
        "transactions": each(TXN, txn, who, (OP.DESCRIBE,)),
        "transactions producers": each(TOPIC, topic, who, (OP.READ,)),
        "streams reset": [*each(GROUP, app_id, who, (OP.READ,)), *each(TOPIC, topic, who, (OP.DESCRIBE,)),
                          *each(TOPIC, f"{app_id}-", who, (OP.DESCRIBE, OP.DELETE), PREFIXED)],
    }


class Cli:
    """``strom`` run as a user runs it, logged in as a new principal (no ACLs yet)."""

    def __init__(self, kafka: KafkaCluster, admin: AdminClient, cwd: Path,
                 settings: dict[str, str] | None = None) -> None:
        self.settings = settings or principal(kafka, admin, "cli")
        self.who, self.cwd = f"User:{self.settings['sasl.username']}", cwd
        self.acls: list = []  # the line of docs/deploy.md it runs with

    def __call__(self, *args: str, stdin: str = "") -> tuple[int, str, str]:
        command = [STROM, *args, "-b", self.settings["bootstrap.servers"],
                   *(arg for key, value in self.settings.items() if key != "bootstrap.servers"
                     for arg in ("-X", f"{key}={value}"))]
        started = time.monotonic()
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120, cwd=self.cwd)
        assert time.monotonic() - started < 60
        assert self.settings["sasl.password"] not in done.stdout + done.stderr
        return done.returncode, done.stdout, done.stderr.strip()

    def ok(self, *args: str, stdin: str = "") -> str:
        code, out, err = self(*args, stdin=stdin)
        assert code == 0, (args, err)
        return out

    def refused(self, wanted: str, *args: str) -> None:
        """The command ends in one error line naming this principal, ``wanted`` (operation and resource)."""
        code, _, err = self(*args, stdin="a\n")
        assert code == 2 and err.count("\n") == 0, err
        assert err.startswith(f"error: {self.who} may not {wanted}"), err


def test_each_cli_command_runs_with_only_its_documented_acls_and_names_a_missing_one(kafka, admin, tmp_path):
    """Each command (or group of commands sharing a line of docs/deploy.md's table) runs as its own
    principal: refused with one line naming what is missing, then run with that line alone."""
    topic, group, app_id, txn = unique("orders"), unique("billing"), unique("app"), unique("txn")

    def cli(line: str) -> Cli:
        user = Cli(kafka, admin, tmp_path)
        user.acls = cli_acls(user.who, topic, group, app_id, txn)[line]
        return user

    stranger = Cli(kafka, admin, tmp_path, {**Cli(kafka, admin, tmp_path).settings, "sasl.password": "wrong"})
    code, _, err = stranger("topics", "list")
    assert code == 2 and err.count("\n") == 0 and err.startswith("error: Cannot log in to"), err
    assert f"did not accept {stranger.who} with SCRAM-SHA-512" in err
    distrusting = Cli(kafka, admin, tmp_path)
    distrusting.settings["ssl.ca.location"] = str(kafka.security.pki.other_ca)
    code, _, err = distrusting("topics", "list")
    assert code == 2 and "certificate is not signed by a CA the client trusts" in err, err

    topics_user = cli("topics")
    topics_user.refused(f"Create Topic '{topic}'", "topics", "create", topic, "--partitions", "1")
    grant(admin, *topics_user.acls)
    topics_user.ok("topics", "create", topic, "--partitions", "1")
    assert topic in topics_user.ok("topics", "list")
    assert topics_user.ok("topics", "describe", topic)

    producer_user = cli("produce")
    producer_user.refused(f"Write Topic '{topic}'", "produce", topic)  # one line, the operation needed
    grant(admin, *producer_user.acls)
    producer_user.ok("produce", topic, stdin="a\nb\n")

    reader = cli("consume")
    reader.refused(f"Read Topic '{topic}'", "consume", topic, "-o", "beginning", "-e")
    grant(admin, *reader.acls[:1])
    reader.refused(f"Describe Group '{clients.UNUSED_GROUP}'", "consume", topic, "-o", "beginning", "-e")
    grant(admin, *reader.acls)
    assert reader.ok("consume", topic, "-o", "beginning", "-e").split() == ["a", "b"]

    member = cli("consume --group")
    grant(admin, *member.acls[:1])
    member.refused(f"Read Group '{group}'", "consume", topic, "-g", group, "-o", "beginning", "-c", "2")
    grant(admin, *member.acls)
    assert member.ok("consume", topic, "-g", group, "-o", "beginning", "-c", "2").split() == ["a", "b"]

    resetter = cli("groups reset-offsets")
    reset_offsets = ("groups", "reset-offsets", group, "--topic", topic, "--to-earliest")
    resetter.refused(f"Describe Group '{group}'", *reset_offsets)
    grant(admin, *resetter.acls[:1], *each(TOPIC, topic, resetter.who, (OP.DESCRIBE,)))
    resetter.refused(f"Read Topic '{topic}'", *reset_offsets)  # OffsetCommit reads the topic too
    grant(admin, *resetter.acls)
    resetter.ok(*reset_offsets)
    reset_to = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result()
    assert [tp.offset for tp in reset_to.topic_partitions] == [0]  # committed, not only said

    operator = cli("groups")
    operator.refused(f"Describe Group '{group}'", "groups", "describe", group)
    grant(admin, *operator.acls)
    assert group in operator.ok("groups", "list")
    operator.ok("groups", "describe", group)

    reader_settings = {"bootstrap.servers": kafka.bootstrap_servers, **kafka.admin_settings}
    start = Consumer({**reader_settings, "group.id": unique("w")}).get_watermark_offsets(
        TopicPartition(topic, 0), timeout=10)[1]
    producer = Producer({**reader_settings, "transactional.id": txn})
    producer.init_transactions(30)
    producer.begin_transaction()  # left open: a transaction to describe and abort
    producer.produce(topic, b"open")
    assert producer.flush(30) == 0
    watcher = cli("transactions")
    watcher.refused(f"Describe TransactionalId '{txn}'", "transactions", "describe", txn)
    grant(admin, *watcher.acls)
    assert txn in watcher.ok("transactions", "list")
    assert "Ongoing" in watcher.ok("transactions", "describe", txn)
    inspector = cli("transactions producers")
    inspector.refused(f"Read Topic '{topic}'", "transactions", "describe-producers", "--topic", topic)
    grant(admin, *inspector.acls)
    inspector.ok("transactions", "describe-producers", "--topic", topic)
    inspector.ok("transactions", "find-hanging", "--topic", topic)
    abort = ("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start))
    inspector.refused("ClusterAction Cluster 'kafka-cluster'", *abort)  # an administrator's (docs)
    Cli(kafka, admin, tmp_path, reader_settings).ok(*abort)

    topics(admin, f"{app_id}-counts-changelog", partitions=1)  # an internal topic the reset deletes
    reset = ("streams", "reset", app_id, "--input-topics", topic, "--state-dir", str(tmp_path))
    resetting = cli("streams reset")
    resetting.refused(f"Describe Topic '{topic}'", *reset)  # the input topic is hidden
    grant(admin, *resetting.acls[1:2])
    resetting.refused(f"Read Group '{app_id}'", *reset)
    grant(admin, *resetting.acls)
    resetting.ok(*reset)
    assert f"{app_id}-counts-changelog" not in admin.list_topics(timeout=10).topics

    operator.ok("groups", "delete", group)
    topics_user.ok("topics", "delete", topic)
