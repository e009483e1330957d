"""The ACLs docs/deploy.md lists for a strom application are enough: a SparkStreams application
(exactly_once_v2, a repartition topic and a changelogged store, its internal topics created by strom)
and a Spark SQL query through the connector's source and exactly-once sink run on a secured strom broker
with the authorizer on and only those ACLs for their principal."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from security.conftest import sasl
from spark.runtime.wordcount import word_count
from support.kafka import read_partition
from support.secured_clients import application_acls, connector_acls, connector_copy, grant, latest_counts

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def spark():
    import strom.spark
    session = strom.spark.session(app_name="strom-acl-list", log_level="ERROR")
    yield session
    session.stop()


def test_the_documented_acls_run_an_exactly_once_application(guarded, pki, spark, tmp_path):
    from strom.spark.runtime import SparkStreams
    suffix = uuid.uuid4().hex[:8]
    lines, counts, app_id = f"lines-{suffix}", f"counts-{suffix}", f"wc-{suffix}"
    admin_conf = sasl(guarded, pki, user="admin")
    admin = AdminClient(admin_conf)
    for future in admin.create_topics([NewTopic(lines, 2), NewTopic(counts, 2)]).values():
        future.result()
    grant(admin, *(b for line in application_acls("User:alice", app_id, [lines], [counts]).values()
                   for b in line))
    text = [f"w{i % 7} w{i % 3}" for i in range(120)]
    producer = Producer(admin_conf)
    for i, line in enumerate(text):
        producer.produce(lines, line.encode(), key=f"k{i}".encode())
    assert producer.flush(30) == 0
    app = SparkStreams(word_count(lines, counts), {
        "application.id": app_id, "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path),
        "commit.interval.ms": 200, "execution.mode": "microbatch", **sasl(guarded, pki, user="alice")}, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(240), f"lag {app.lag()}"
    finally:
        app.stop()
    assert latest_counts(admin_conf, counts) == dict(Counter(word for line in text for word in line.split()))


@pytest.mark.parametrize("missing", ["transactional ids", "internal topics"])
def test_without_one_line_the_application_fails_with_a_clear_error(guarded, pki, spark, tmp_path, missing):
    from strom.spark.runtime import SparkStreams
    suffix = uuid.uuid4().hex[:8]
    lines, counts, app_id = f"lines-{suffix}", f"counts-{suffix}", f"wc-{suffix}"
    admin_conf = sasl(guarded, pki, user="admin")
    admin = AdminClient(admin_conf)
    for future in admin.create_topics([NewTopic(lines, 2), NewTopic(counts, 2)]).values():
        future.result()
    grant(admin, *(b for line, bindings in application_acls("User:alice", app_id, [lines], [counts]).items()
                   if line != missing for b in bindings))
    producer = Producer(admin_conf)
    producer.produce(lines, b"a b c", key=b"k")
    assert producer.flush(30) == 0
    app = SparkStreams(word_count(lines, counts), {
        "application.id": app_id, "processing.guarantee": "exactly_once_v2", "state.dir": str(tmp_path),
        "commit.interval.ms": 200, "execution.mode": "microbatch", **sasl(guarded, pki, user="alice")}, spark)
    started = time.monotonic()
    with pytest.raises(Exception) as failed:
        app.start()
        app.wait_until_caught_up(120)
    app.stop()
    assert time.monotonic() - started < 120  # refused at once, not retried until a timeout
    wanted = (f"User:alice may not Write TransactionalId '{app_id}-0_" if missing == "transactional ids"
              else f"User:alice may not Create Topic '{app_id}-")
    assert wanted in str(failed.value)


def test_the_documented_acls_run_the_connectors_source_and_exactly_once_sink(guarded, pki, spark, tmp_path):
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"events-{suffix}", f"copies-{suffix}"
    admin_conf = sasl(guarded, pki, user="admin")
    admin = AdminClient(admin_conf)
    for future in admin.create_topics([NewTopic(source, 2), NewTopic(sink, 2)]).values():
        future.result()
    grant(admin, *(b for line in connector_acls("User:alice", source, sink).values() for b in line))
    values = [f"v{i}".encode() for i in range(40)]
    producer = Producer(admin_conf)
    for i, value in enumerate(values):
        producer.produce(source, value, key=f"k{i}".encode())
    assert producer.flush(30) == 0
    connector_copy(spark, sasl(guarded, pki, user="alice"), source, sink, tmp_path / "checkpoint")
    servers = admin_conf.pop("bootstrap.servers")
    copies = [m.value() for p in (0, 1) for m in read_partition(servers, sink, p, **admin_conf)]
    assert sorted(copies) == sorted(values)  # read_committed: each once
