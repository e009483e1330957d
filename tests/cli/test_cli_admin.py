"""`strom topics alter-config|add-partitions|delete-records` and `strom transactions
describe-producers|find-hanging|abort` against the broker."""

from __future__ import annotations

import json
import re

import pytest
from confluent_kafka import KafkaException

from cli.strom_cli import subprocess_strom, unique
from strom.broker import EmbeddedBroker
from strom.kafka import clients

pytestmark = pytest.mark.broker


def _json(strom, *args: str):
    return json.loads(strom.ok(*args, "--output", "json").out)


def test_alter_config_sets_and_removes_topic_configs(strom):
    topic = unique("cfg")
    strom.ok("topics", "create", topic, "--config", "retention.ms=60000")
    configs = lambda: {c["config"]: (c["value"], c["source"])  # noqa: E731
                       for c in _json(strom, "topics", "describe", topic)["configs"]}
    strom.ok("topics", "alter-config", topic, "--set", "cleanup.policy=compact", "--delete", "retention.ms")
    assert configs()["cleanup.policy"] == ("compact", "topic")
    assert configs()["retention.ms"][1] == "default"
    assert "retention.ms" in strom.fails("topics", "alter-config", topic, "--set", "retention.ms=abc")
    assert "at least one" in strom.fails("topics", "alter-config", topic)


def test_describe_names_the_layer_each_config_comes_from(tmp_path):
    """A value the topic inherits from the broker's config is not the topic's own (as Kafka's sources say)."""
    with EmbeddedBroker(data_dir=tmp_path, config={"log.segment.bytes": "2000000"}) as broker:
        topic, at = unique("layers"), ("-b", broker.bootstrap_servers)
        assert subprocess_strom("topics", "create", topic, "--config", "retention.ms=60000", *at).code == 0
        described = subprocess_strom("topics", "describe", topic, "--output", "json", *at)
        assert described.code == 0, described.err
        sources = {c["config"]: (c["value"], c["source"]) for c in json.loads(described.out)["configs"]}
    assert sources["retention.ms"] == ("60000", "topic")
    assert sources["segment.bytes"] == ("2000000", "broker static")
    assert sources["cleanup.policy"] == ("delete", "default")


def test_add_partitions_grows_a_topic_and_refuses_to_shrink_it(strom):
    topic = unique("grow")
    strom.ok("topics", "create", topic, "--partitions", "2")
    grown = strom.ok("topics", "add-partitions", topic, "--partitions", "5").lines
    assert grown == [f"{topic}: 2 -> 5 partition(s)"]
    assert len(_json(strom, "topics", "describe", topic)["partitions"]) == 5
    assert "cannot be removed" in strom.fails("topics", "add-partitions", topic, "--partitions", "3")
    strom.ok("produce", topic, "-p", "4", stdin=b"on-a-new-partition\n")
    assert strom.ok("consume", topic, "-p", "4", "-o", "beginning", "-e").lines == ["on-a-new-partition"]


def test_delete_records_moves_the_log_start(strom):
    topic = unique("trim")
    strom.ok("topics", "create", topic, "--partitions", "2")
    strom.ok("produce", topic, "-p", "0", stdin=b"a\nb\nc\nd\n")
    strom.ok("produce", topic, "-p", "1", stdin=b"x\ny\n")
    assert _json(strom, "topics", "delete-records", topic, "-p", "0", "--before", "2") == [
        {"partition": 0, "log_start_offset": 2}]
    assert strom.ok("consume", topic, "-p", "0", "-o", "beginning", "-e").lines == ["c", "d"]
    assert _json(strom, "topics", "delete-records", topic, "--before", "end") == [
        {"partition": 0, "log_start_offset": 4}, {"partition": 1, "log_start_offset": 2}]
    assert strom.ok("consume", topic, "-o", "beginning", "-e").lines == []
    assert "not an offset" in strom.fails("topics", "delete-records", topic, "--before", "soon")
    assert "not [7]" in strom.fails("topics", "delete-records", topic, "-p", "7", "--before", "end")


def test_producers_open_transactions_and_abort(strom, broker):
    topic = unique("txn")
    strom.ok("topics", "create", topic)
    strom.ok("produce", topic, stdin=b"plain\n")
    transactional_id = unique("stuck")
    producer = clients.producer(broker.bootstrap_servers, **{"transactional.id": transactional_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"never-committed")
    producer.flush(30)

    producers = _json(strom, "transactions", "describe-producers", "--topic", topic)
    time_ = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z"
    assert all(re.fullmatch(time_, p["last_timestamp"]) for p in producers), producers
    open_ones = [p for p in producers if p["open_transaction_start_offset"] >= 0]
    assert len(producers) == 2 and len(open_ones) == 1 and open_ones[0]["open_transaction_start_offset"] == 1
    # still coordinated (Ongoing at its coordinator), so not hanging even with no age limit
    hanging = _json(strom, "transactions", "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert hanging == []

    aborted = strom.ok("transactions", "abort", "--transactional-id", transactional_id).lines
    assert aborted[0].startswith(f"aborted {transactional_id}: now ")
    assert strom.ok("consume", topic, "-o", "beginning", "-e").lines == ["plain"]
    assert all(p["open_transaction_start_offset"] == -1
               for p in _json(strom, "transactions", "describe-producers", "--topic", topic))
    with pytest.raises(KafkaException):  # the old producer is fenced
        producer.commit_transaction(30)
    assert "nothing to abort" in strom.fails("transactions", "abort", "--transactional-id", transactional_id)
    described = _json(strom, "transactions", "describe", transactional_id)
    assert described["transactional.id"] == transactional_id and described["partitions"] == []
