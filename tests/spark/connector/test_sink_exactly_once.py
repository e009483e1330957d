"""The exactly-once write path of one Spark write task, driven directly (no Spark scheduler), on strom
broker and on the 3-node Apache Kafka cluster.

A replayed batch must be recognised by its marker and written once; an attempt that crashed with
an open transaction must be fenced and its records never become visible to read_committed.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from strom.errors import BrokerUnavailableError
from strom.kafka import clients
from strom.spark.connector.options import sink_options
from strom.spark.connector.sink import TaskIdentity, write_partition
from support.kafka import create_topic

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def _batches(values: list[str]) -> list[pa.RecordBatch]:
    return [pa.record_batch([pa.array(values, pa.string())], names=["value"])]


def _options(cluster, topic: str):
    return sink_options({"kafka.bootstrap.servers": cluster.bootstrap_servers, "topic": topic,
                         "delivery.guarantee": "exactly_once"}, streaming=False)


def test_a_replayed_batch_is_written_once(any_broker, consume_all):
    broker = any_broker
    topic = create_topic(broker.bootstrap_servers)
    identity = TaskIdentity("query-replay", partition=0, batch_id=0)
    first = write_partition(_options(broker, topic), iter(_batches(["a", "b"])), identity)
    replay = write_partition(_options(broker, topic), iter(_batches(["a", "b"])), identity)
    after = write_partition(_options(broker, topic), iter(_batches(["c"])),
                            TaskIdentity("query-replay", partition=0, batch_id=1))
    assert (first.records, first.replayed) == (2, False)
    assert (replay.records, replay.replayed) == (0, True)
    assert (after.records, after.replayed) == (1, False)
    assert [m.value() for m in consume_all(broker.bootstrap_servers, topic, expected=3)] == [b"a", b"b", b"c"]


def test_a_crashed_attempt_is_fenced_and_its_records_stay_invisible(any_broker, consume_all):
    broker = any_broker
    topic = create_topic(broker.bootstrap_servers)
    identity = TaskIdentity("query-zombie", partition=3, batch_id=7)
    zombie = clients.producer(broker.bootstrap_servers, **{"transactional.id": identity.transactional_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"from-the-zombie")
    zombie.flush(30)

    retried = write_partition(_options(broker, topic), iter(_batches(["retried"])), identity)
    assert retried.records == 1
    with pytest.raises(Exception, match=r"(?i)fenc"):
        zombie.commit_transaction(30)
    assert [m.value() for m in consume_all(broker.bootstrap_servers, topic, expected=1)] == [b"retried"]
    uncommitted = consume_all(broker.bootstrap_servers, topic, expected=2, isolation="read_uncommitted")
    assert sorted(m.value() for m in uncommitted) == [b"from-the-zombie", b"retried"]


def test_an_unreachable_broker_is_a_clear_error():
    options = sink_options({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t",
                            "kafka.message.timeout.ms": "2000"}, streaming=False)
    with pytest.raises(BrokerUnavailableError, match=r"Writing to Kafka at 127\.0\.0\.1:9 failed"):
        write_partition(options, iter(_batches(["x"])), TaskIdentity("q", 0, 0))
