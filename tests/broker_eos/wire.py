"""Raw Kafka requests for the broker tests: produce a hand-built batch, list offsets, get a producer id."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.produce.v9 import request as produce
from kio.static.primitive import i8, i16, i32, i64

from strom.kafka.wire import WireClient

LATEST = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def produce_request(topic: str, partition: int, batch: bytes,
                    transactional_id: str | None = None) -> produce.ProduceRequest:
    return produce.ProduceRequest(
        transactional_id=transactional_id, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
        topic_data=(produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=i32(partition), records=batch),)),))


def produce_result(response) -> tuple[ErrorCode, int]:
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def send_batch(client: WireClient, topic: str, partition: int, batch: bytes,
               transactional_id: str | None = None) -> tuple[ErrorCode, int]:
    return produce_result(client.send(produce_request(topic, partition, batch, transactional_id)))


def latest_offset(client: WireClient, topic: str, partition: int, isolation: int) -> int:
    response = client.send(list_offsets.ListOffsetsRequest(
        replica_id=i32(-1), isolation_level=i8(isolation), topics=(list_offsets.ListOffsetsTopic(
            name=topic, partitions=(list_offsets.ListOffsetsPartition(
                partition_index=i32(partition), current_leader_epoch=i32(-1), timestamp=i64(LATEST)),)),)))
    answer = response.topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    return answer.offset


def init_producer_id(client: WireClient, producer_id: int = -1, epoch: int = -1,
                     transactional_id: str | None = None) -> tuple[int, int]:
    """A new producer id, or (KIP-360) the next epoch of ``producer_id``."""
    response = client.send(InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=i64(producer_id), producer_epoch=i16(epoch)))
    assert response.error_code == ErrorCode.none
    return response.producer_id, response.producer_epoch
