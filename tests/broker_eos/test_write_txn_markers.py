"""WriteTxnMarkers (API key 27) as an operator sends it to end a hanging transaction: raw frames
against the broker, checked for the partition's answer and its last stable offset."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.primitive import i16, i32, i64

from broker_eos.batches import data_batch
from broker_eos.wire import READ_COMMITTED, READ_UNCOMMITTED, init_producer_id, latest_offset, send_batch
from strom.kafka import clients
from strom.kafka.wire import WireClient

pytestmark = pytest.mark.broker


def _abort(client: WireClient, topic: str, partition: int, pid: int, epoch: int,
           coordinator_epoch: int = 0) -> ErrorCode:
    response = client.send(WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=i64(pid), producer_epoch=i16(epoch), transaction_result=False,
        topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=(i32(partition),)),),
        coordinator_epoch=i32(coordinator_epoch)),)))
    (marker,) = response.markers
    assert marker.producer_id == pid and marker.topics[0].name == topic
    return marker.topics[0].partitions[0].error_code


def test_an_abort_marker_ends_an_open_transaction_and_fenced_or_unknown_ones_are_refused(broker):
    topic = f"markers-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    txn_id = f"tx-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap_servers) as client:
        assert send_batch(client, topic, 0, data_batch(-1, -1, -1, [b"plain"]))[0] == ErrorCode.none
        init_producer_id(client, transactional_id=txn_id)
        pid, epoch = init_producer_id(client, transactional_id=txn_id)  # epoch 1
        client.send(add_partitions.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=i64(pid),
            v3_and_below_producer_epoch=i16(epoch), v3_and_below_topics=(
                add_partitions.AddPartitionsToTxnTopic(name=topic, partitions=(i32(0),)),)))
        batch = data_batch(pid, epoch, 0, [b"open"], transactional=True)
        assert send_batch(client, topic, 0, batch, txn_id) == (ErrorCode.none, 1)
        assert latest_offset(client, topic, 0, READ_COMMITTED) == 1

        assert _abort(client, topic, 1, pid, epoch) == ErrorCode.unknown_topic_or_partition
        assert _abort(client, f"{topic}-missing", 0, pid, epoch) == ErrorCode.unknown_topic_or_partition
        assert _abort(client, topic, 0, pid, epoch - 1) == ErrorCode.invalid_producer_epoch
        assert latest_offset(client, topic, 0, READ_COMMITTED) == 1, "refused markers are not written"

        assert _abort(client, topic, 0, pid, epoch) == ErrorCode.none
        assert latest_offset(client, topic, 0, READ_COMMITTED) == 3, "past the record and its marker"
        assert latest_offset(client, topic, 0, READ_UNCOMMITTED) == 3
        # the partition has seen coordinator epoch 0: an older coordinator is fenced
        assert _abort(client, topic, 0, pid, epoch, coordinator_epoch=-1) \
            == ErrorCode.transaction_coordinator_fenced
