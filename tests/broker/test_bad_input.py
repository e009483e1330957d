"""Bad input never takes the broker down: garbage frames, huge prefixes, corrupt batches, bad names."""

from __future__ import annotations

import datetime
import io
import random
import socket
import struct
import time

import pytest
from broker_helpers import closed_by_broker, logged, unique
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v13.response import MetadataResponse
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.produce.v9.response import ProduceResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from strom.broker import EmbeddedBroker
from strom.broker.log.records import build_batch
from strom.kafka import clients

pytestmark = pytest.mark.broker


def _connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _still_serves(bootstrap: str) -> None:
    metadata = clients.admin(bootstrap).list_topics(timeout=10)
    assert metadata.brokers, "the broker answers metadata after the bad input"


def _produce_raw(bootstrap: str, topic: str, records: bytes) -> ProduceResponse:
    request = ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
                             topic_data=(TopicProduceData(name=topic, partition_data=(
                                 PartitionProduceData(index=0, records=records),)),))
    buffer = io.BytesIO()
    entity_writer(RequestHeader)(buffer, RequestHeader(request_api_key=0, request_api_version=9,
                                                      correlation_id=7, client_id="raw"))
    entity_writer(ProduceRequest)(buffer, request)
    payload = buffer.getvalue()
    with _connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        frame = _recv(sock, size)
    header_size = 5  # correlation id + empty tagged fields (response header v1)
    return entity_reader(ProduceResponse)(frame, header_size)[0]


def _recv(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def test_garbage_truncated_and_huge_frames_close_only_that_connection(broker):
    rng = random.Random(1234)
    bystander = _connect(broker.bootstrap_servers)  # an idle client that must stay connected
    frames = [struct.pack(">i", 2**31 - 1), struct.pack(">i", -5), struct.pack(">i", 3) + b"abc",
              struct.pack(">i", 12) + struct.pack(">hhi", 999, 0, 1) + b"\0\0\0\0",  # unknown api key
              struct.pack(">i", 10) + struct.pack(">hhi", 3, 12, 1) + b"\0\0"]  # truncated metadata body
    frames += [rng.randbytes(rng.randint(1, 300)) for _ in range(60)]
    frames += [struct.pack(">i", 200) + struct.pack(">hhi", rng.choice([0, 1, 3, 8, 19]), 8, 1)
               + rng.randbytes(192) for _ in range(60)]  # served APIs and versions, garbage bodies
    for frame in frames:
        with _connect(broker.bootstrap_servers) as sock:
            sock.sendall(frame)
            if len(frame) >= 4 and struct.unpack(">i", frame[:4])[0] == len(frame) - 4:
                assert closed_by_broker(sock)
    with _connect(broker.bootstrap_servers) as sock:  # a served API in a version it does not serve
        join_group_v9 = struct.pack(">hhih", 11, 9, 1, -1) + rng.randbytes(50)
        sock.sendall(struct.pack(">i", len(join_group_v9)) + join_group_v9)
        _size, correlation_id = struct.unpack(">ii", _recv(sock, 8))
        assert correlation_id == 1
    truncated = _connect(broker.bootstrap_servers)
    truncated.sendall(struct.pack(">i", 1000) + b"only part of the frame")
    truncated.close()
    _still_serves(broker.bootstrap_servers)
    api_versions_v0 = struct.pack(">hhih", 18, 0, 99, 0)  # header v1 with an empty client id
    bystander.sendall(struct.pack(">i", len(api_versions_v0)) + api_versions_v0)
    size, correlation_id, error_code = struct.unpack(">iih", _recv(bystander, 10))
    assert (correlation_id, error_code) == (99, 0) and size > 6
    bystander.close()
    assert logged(broker, "exceeds socket.request.max.bytes=104857600; raise that config")
    assert logged(broker, "a frame of -5 bytes cannot hold a request header")
    assert logged(broker, "api_key=999 v0 is not served")
    assert logged(broker, "does not match Kafka's schema of that version")


def test_apis_the_broker_does_not_serve_get_unsupported_version(broker):
    create_delegation_token_v1 = struct.pack(">hhih", 38, 1, 5, -1)
    with _connect(broker.bootstrap_servers) as sock:
        sock.sendall(struct.pack(">i", len(create_delegation_token_v1)) + create_delegation_token_v1)
        size, correlation_id, error_code = struct.unpack(">iih", _recv(sock, 10))
    assert (correlation_id, error_code) == (5, ErrorCode.unsupported_version.value) and size >= 6
    assert logged(broker, "answered UNSUPPORTED_VERSION to api_key=38 v1")
    metadata_v13 = struct.pack(">hhih", 3, 13, 6, -1)  # served APIs in versions past the served ones
    list_offsets_v9 = struct.pack(">hhih", 2, 9, 7, -1)
    api_versions_v9 = struct.pack(">hhih", 18, 9, 8, -1)
    with _connect(broker.bootstrap_servers) as sock:
        sock.sendall(struct.pack(">i", len(api_versions_v9)) + api_versions_v9)
        size, correlation_id, error_code, count = struct.unpack(">iihi", _recv(sock, 14))
        assert (correlation_id, error_code) == (8, ErrorCode.unsupported_version.value)
        assert count > 20, "answered as v0 with the versions the broker serves, so clients can retry"
        _recv(sock, size - 10)
        sock.sendall(struct.pack(">i", len(metadata_v13)) + metadata_v13)
        (size,) = struct.unpack(">i", _recv(sock, 4))
        answer = entity_reader(MetadataResponse)(_recv(sock, size), 5)[0]  # after the v1 header
        assert answer.error_code == ErrorCode.unsupported_version
        sock.sendall(struct.pack(">i", len(list_offsets_v9)) + list_offsets_v9)
        assert closed_by_broker(sock), "ListOffsets has no top-level error code to refuse with"
    assert logged(broker, "answered UNSUPPORTED_VERSION to api_key=3 v13")
    assert logged(broker, "api_key=2 v9 is not served")
    _still_serves(broker.bootstrap_servers)


def test_corrupt_and_oversized_batches_get_error_codes(broker):
    topic = unique("bad-batches")
    clients.create_topics(broker.bootstrap_servers, {topic: 1}, config={"max.message.bytes": "2048"})
    good = build_batch([(b"k", b"v")], 1)
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    response = _produce_raw(broker.bootstrap_servers, topic, bytes(corrupt))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.corrupt_message
    big = build_batch([(b"k", bytes(5000))], 1)
    response = _produce_raw(broker.bootstrap_servers, topic, big)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.message_too_large
    response = _produce_raw(broker.bootstrap_servers, "no-such-topic-" + topic, good)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
    response = _produce_raw(broker.bootstrap_servers, topic, good)
    assert response.responses[0].partition_responses[0].base_offset == 0  # nothing bad was written


def test_invalid_topic_names_and_out_of_range_fetch(broker):
    admin = clients.admin(broker.bootstrap_servers)
    for name in ["bad name", "x" * 250, "..", "slash/topic"]:
        with pytest.raises(KafkaException) as info:
            admin.create_topics([NewTopic(name, 1)])[name].result(10)
        assert info.value.args[0].code() == KafkaError.TOPIC_EXCEPTION

    topic = unique("range")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    consumer = clients.consumer(broker.bootstrap_servers, None, **{"auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, 0, 42)])
    message = None
    for _ in range(20):
        message = consumer.poll(0.5)
        if message is not None:
            break
    consumer.close()
    assert message is not None and message.error().code() == KafkaError._AUTO_OFFSET_RESET


def test_connection_limit_and_idle_connections(tmp_path):
    with EmbeddedBroker(config={"max.connections": 3, "connections.max.idle.ms": 1500}) as limited:
        held = [_connect(limited.bootstrap_servers) for _ in range(3)]
        for sock in held:  # in the middle of a request: not closed to make room for a newcomer
            sock.sendall(struct.pack(">i", 100) + b"\0" * 10)
        time.sleep(0.5)
        extra = _connect(limited.bootstrap_servers)
        assert closed_by_broker(extra)
        extra.close()
        assert logged(limited, "max.connections=3 reached; raise max.connections")
        started = time.monotonic()
        assert all(closed_by_broker(sock) for sock in held)  # idle past connections.max.idle.ms
        assert time.monotonic() - started < 8
        for sock in held:
            sock.close()
        _still_serves(limited.bootstrap_servers)
