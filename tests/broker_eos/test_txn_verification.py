"""Transactional batches are written only for a transaction the coordinator knows (KIP-890's
verification): a forged or stray transactional batch can never hold back the last stable offset."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from broker_eos.batches import data_batch
from broker_eos.wire import READ_COMMITTED, READ_UNCOMMITTED, init_producer_id, latest_offset, send_batch
from strom.broker import EmbeddedBroker
from strom.broker.config import BrokerConfig
from strom.broker.log.partition import Partition
from strom.broker.log.records import split_batches
from strom.kafka import clients
from strom.kafka.wire import WireClient

pytestmark = pytest.mark.broker


def _topic(broker: EmbeddedBroker) -> str:
    name = f"verify-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers, {name: 1})
    return name


def _add_partition(client: WireClient, txn_id: str, pid: int, epoch: int, topic: str) -> None:
    response = client.send(add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=i64(pid),
        v3_and_below_producer_epoch=i16(epoch), v3_and_below_topics=(
            add_partitions.AddPartitionsToTxnTopic(name=topic, partitions=(i32(0),)),)))
    assert response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0


def test_transactional_batches_of_unknown_producers_or_partitions_are_refused(broker):
    topic = _topic(broker)
    with WireClient(broker.bootstrap_servers) as client:
        for i in range(5):
            assert send_batch(client, topic, 0, data_batch(-1, -1, -1, [b"plain%d" % i]))[0] == ErrorCode.none
        forged = data_batch(987_654, 0, 0, [b"forged"], transactional=True)
        assert send_batch(client, topic, 0, forged)[0] == ErrorCode.invalid_txn_state
        assert send_batch(client, topic, 0, forged, "nobody")[0] == ErrorCode.invalid_txn_state
        txn_id = f"tx-{uuid.uuid4().hex[:8]}"
        init_producer_id(client, transactional_id=txn_id)
        pid, epoch = init_producer_id(client, transactional_id=txn_id)  # epoch 1: epoch 0 is fenced
        unadded = data_batch(pid, epoch, 0, [b"not added"], transactional=True)
        assert send_batch(client, topic, 0, unadded, txn_id)[0] == ErrorCode.invalid_txn_state
        assert latest_offset(client, topic, 0, READ_COMMITTED) == 5, "the LSO is not held back"
        _add_partition(client, txn_id, pid, epoch, topic)
        assert send_batch(client, topic, 0, unadded, txn_id) == (ErrorCode.none, 5)
        stale = data_batch(pid, epoch - 1, 1, [b"stale"], transactional=True)
        assert send_batch(client, topic, 0, stale, txn_id)[0] == ErrorCode.invalid_producer_epoch
        assert latest_offset(client, topic, 0, READ_COMMITTED) == 5, "the real transaction is open"
        assert latest_offset(client, topic, 0, READ_UNCOMMITTED) == 6


def test_a_transaction_the_coordinator_does_not_know_is_aborted_at_start(tmp_path):
    with EmbeddedBroker(tmp_path) as own:
        topic = _topic(own)
        with WireClient(own.bootstrap_servers) as client:
            send_batch(client, topic, 0, data_batch(-1, -1, -1, [b"before"]))
    # a data dir written before transactional batches were verified: an open transaction of a
    # producer id the coordinator never issued
    partition = Partition(topic, 0, tmp_path / "topics" / topic / "0", BrokerConfig().topic_defaults())
    partition.append(split_batches(data_batch(987_654, 0, 0, [b"forged"], transactional=True)))
    partition.close()
    with EmbeddedBroker(tmp_path) as own, WireClient(own.bootstrap_servers) as client:
        assert latest_offset(client, topic, 0, READ_COMMITTED) == 3, "aborted: forged record + marker"
        assert latest_offset(client, topic, 0, READ_UNCOMMITTED) == 3
