"""Hostile input and resource exhaustion (issue #20): raw frames through the broker's own protocol
types; each input is refused or bounded, and the broker keeps serving everyone else."""

from __future__ import annotations

import datetime
import io
import os
import resource
import select
import socket
import struct
import threading
import time

import cramjam
import pytest
from broker_helpers import closed_by_broker, logged, unique
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic
from crc32c import crc32c
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import request as fetch
from kio.schema.metadata.v12 import request as metadata
from kio.schema.produce.v9 import request as produce
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i64

from strom.broker import EmbeddedBroker
from strom.broker.log.records import CRC_START, GZIP, HEADER_SIZE, LZ4, SNAPPY, ZSTD, build_batch
from strom.errors import BrokerUnavailableError
from strom.kafka import clients
from strom.kafka.wire import WireClient

pytestmark = pytest.mark.broker


def forge(batch: bytes, **fields: int) -> bytes:
    """`batch` with header fields overwritten (CRC recomputed: only the content is wrong)."""
    offsets = {"attributes": (21, ">h"), "last_offset_delta": (23, ">i"), "producer_id": (43, ">q"),
               "producer_epoch": (51, ">h"), "base_sequence": (53, ">i"), "records_count": (57, ">i")}
    forged = bytearray(batch)
    for name, value in fields.items():
        position, fmt = offsets[name]
        struct.pack_into(fmt, forged, position, value)
    struct.pack_into(">I", forged, 17, crc32c(memoryview(forged)[CRC_START:]))
    return bytes(forged)


def _produce_request(topic: str, records: bytes, transactional_id: str | None = None,
                     partition: int = 0) -> produce.ProduceRequest:
    return produce.ProduceRequest(
        transactional_id=transactional_id, acks=i16(-1), timeout=datetime.timedelta(seconds=10),
        topic_data=(produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=i32(partition), records=records),)),))


def produce_raw(bootstrap: str, topic: str, records: bytes, transactional_id: str | None = None,
                partition: int = 0) -> tuple[ErrorCode, int]:
    with WireClient(bootstrap) as client:
        answer = client.send(_produce_request(topic, records, transactional_id, partition))
        answer = answer.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def metadata_request(names: list[str], auto_create: bool = True) -> metadata.MetadataRequest:
    return metadata.MetadataRequest(
        topics=tuple(metadata.MetadataRequestTopic(topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False)


def now_ms() -> int:
    return int(time.time() * 1000)


def test_offset_delta_that_disagrees_with_the_record_count_is_invalid_record(broker):
    topic = unique("delta")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    one = build_batch([(b"k", b"v")], now_ms())
    forged = forge(one, last_offset_delta=2**31 - 1)
    code, _ = produce_raw(broker.bootstrap_servers, topic, forged * 3)
    assert code == ErrorCode.invalid_record
    code, _ = produce_raw(broker.bootstrap_servers, topic, forge(one, records_count=5))
    assert code == ErrorCode.invalid_record
    assert produce_raw(broker.bootstrap_servers, topic, one) == (ErrorCode.none, 0), "nothing was written"


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_accept_loop_survives_running_out_of_file_descriptors():
    with EmbeddedBroker() as limited:
        limit = _open_files(limited.pid) + 10
        resource.prlimit(limited.pid, resource.RLIMIT_NOFILE, (limit, limit))
        flood = [socket.create_connection(("127.0.0.1", limited.port)) for _ in range(30)]
        assert logged(limited, "too many open files")
        for sock in flood:
            sock.close()
        metadata = clients.admin(limited.bootstrap_servers).list_topics(timeout=10)
        assert metadata.brokers, "new clients are served once descriptors are free again"
        assert limited.log_path.read_text().count("too many open files") <= 3, "rate-limited"


def test_partitions_beyond_the_open_files_limit_are_refused_without_leaking(tmp_path):
    with EmbeddedBroker(data_dir=tmp_path) as limited:
        resource.prlimit(limited.pid, resource.RLIMIT_NOFILE, (400, 400))
        before = _open_files(limited.pid)
        admin = clients.admin(limited.bootstrap_servers)
        huge = unique("huge")
        with pytest.raises(KafkaException) as refused:
            admin.create_topics([NewTopic(huge, 5000)])[huge].result(30)
        assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS
        assert "ulimit -n" in refused.value.args[0].str()
        assert not (tmp_path / "topics" / huge).exists()
        assert _open_files(limited.pid) <= before + 5
        small = unique("small")
        admin.create_topics([NewTopic(small, 2)])[small].result(30)
        names = [unique("auto") for _ in range(200)]
        with WireClient(limited.bootstrap_servers) as client:  # auto-creation stops at the limit too
            answer = client.send(metadata_request(names))
        created = [t.name for t in answer.topics if t.error_code == ErrorCode.none]
        assert 0 < len(created) < 200
        assert clients.admin(limited.bootstrap_servers).list_topics(timeout=10).brokers


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def test_size_prefixes_alone_neither_reserve_the_request_memory_nor_block_others():
    with EmbeddedBroker() as own:
        before = _rss_mb(own.pid)
        stalled = [socket.create_connection(("127.0.0.1", own.port)) for _ in range(3)]
        for sock, mib in zip(stalled, (100, 100, 56), strict=True):
            sock.sendall(struct.pack(">i", mib << 20) + b"\0\0\0\3")  # a Metadata frame that never comes
        time.sleep(0.5)
        started = time.monotonic()
        assert clients.admin(own.bootstrap_servers).list_topics(timeout=10).brokers
        assert time.monotonic() - started < 8, "other clients are served at once"
        assert _rss_mb(own.pid) - before < 32, "memory is reserved as bytes arrive, not by the prefix"
        for sock in stalled:
            sock.close()


def test_idle_connections_hold_no_request_buffers():
    with EmbeddedBroker() as own:
        records = b"\0" * (1900 << 10)  # a Produce of 1.9 MiB for a topic that does not exist
        before = _rss_mb(own.pid)
        idle = []
        for _ in range(60):
            client = WireClient(own.bootstrap_servers)
            assert client.send(_produce_request("no-such-topic", records)).responses
            idle.append(client)
        grown = _rss_mb(own.pid) - before
        for client in idle:
            client.close()
        assert grown < 40, f"{grown:.0f} MB kept by 60 idle connections"


def test_batches_consumers_could_not_read_are_refused(broker):
    topic = unique("unreadable")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    three = build_batch([(b"k", b"1"), (b"k", b"2"), (b"k", b"3")], now_ms())
    refused = {
        "unknown codec": (forge(three, attributes=5), ErrorCode.invalid_record),
        "garbage zstd": (forge(three, attributes=4), ErrorCode.corrupt_message),
        "fewer claimed": (forge(three, records_count=2, last_offset_delta=1), ErrorCode.invalid_record),
        "more claimed": (forge(three, records_count=4, last_offset_delta=3), ErrorCode.invalid_record),
    }
    for name, (batch, expected) in refused.items():
        assert produce_raw(broker.bootstrap_servers, topic, batch)[0] == expected, name
    assert produce_raw(broker.bootstrap_servers, topic, three) == (ErrorCode.none, 0)


def _compressed(batch: bytes, codec: int) -> bytes:
    """`batch` with its records compressed by `codec` (as a producer sends them)."""
    compress = {GZIP: cramjam.gzip.compress, SNAPPY: cramjam.snappy.compress_raw, LZ4: cramjam.lz4.compress,
                ZSTD: cramjam.zstd.compress}[codec]
    packed = bytearray(batch[:HEADER_SIZE] + bytes(compress(batch[HEADER_SIZE:])))
    struct.pack_into(">i", packed, 8, len(packed) - 12)
    return forge(bytes(packed), attributes=codec)


def test_batches_that_decompress_beyond_the_limit_are_refused():
    """A topic's batches may decompress to DECOMPRESSED_LIMIT_FACTOR times its max.message.bytes
    (here 64 x 64 KiB = 4 MiB); a few KB of zeros standing for 16 MiB are refused, not inflated."""
    with EmbeddedBroker(config={"message.max.bytes": 65536}) as own:
        topic = unique("bombs")
        clients.create_topics(own.bootstrap_servers, {topic: 1})
        bomb = build_batch([(None, b"\0" * (16 << 20))], now_ms())
        for codec in (GZIP, SNAPPY, LZ4, ZSTD):
            assert produce_raw(own.bootstrap_servers, topic, _compressed(bomb, codec))[0] \
                == ErrorCode.corrupt_message, codec
            # snappy compresses zeros only 21:1, and the compressed batch must fit max.message.bytes
            fits = build_batch([(None, b"\0" * ((1 if codec == SNAPPY else 3) << 20))], now_ms())
            assert produce_raw(own.bootstrap_servers, topic, _compressed(fits, codec))[0] \
                == ErrorCode.none, codec
        assert logged(own, f"more than {4 << 20} bytes")  # snappy states its length up front
        assert logged(own, f"into at most {4 << 20} bytes")


def test_names_with_a_trailing_newline_are_illegal_and_ids_are_logged_escaped(broker):
    with WireClient(broker.bootstrap_servers) as client:
        answer = client.send(metadata_request(["newline\n", "ok-" + unique("name")]))
    codes = [t.error_code for t in answer.topics]
    assert codes == [ErrorCode.invalid_topic_exception, ErrorCode.none]
    topic = unique("escaped")
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    corrupt = forge(build_batch([(b"k", b"v")], now_ms()), records_count=9)
    with WireClient(broker.bootstrap_servers, client_id="evil\nFORGED LINE \x1b[31m") as client:
        client.send(_produce_request(topic, corrupt))
    assert logged(broker, "from client 'evil\\nFORGED LINE \\x1b[31m'")
    assert "\nFORGED LINE" not in broker.log_path.read_text()


def _fetch(partitions: list[int], max_bytes: int) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=10), min_bytes=i32(1), max_bytes=i32(max_bytes),
        topics=(fetch.FetchTopic(topic="capped", partitions=tuple(
            fetch.FetchPartition(partition=i32(p), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20))
            for p in partitions)),))


def test_fetch_lists_each_partition_once_within_fetch_max_bytes():
    with EmbeddedBroker(config={"fetch.max.bytes": 65536}) as own:
        clients.create_topics(own.bootstrap_servers, {"capped": 4})
        with WireClient(own.bootstrap_servers) as client:
            for partition in range(4):
                for _ in range(10):
                    batch = build_batch([(b"k", bytes(8000))], now_ms())
                    assert produce_raw(own.bootstrap_servers, "capped", batch, partition=partition)[0] == 0
            answer = client.send(_fetch([0] * 2000 + [1, 2, 3], 2**31 - 1)).responses[0].partitions
        assert sorted(p.partition_index for p in answer) == [0, 1, 2, 3]
        assert sum(len(p.records or b"") for p in answer) <= 65536


def test_connections_per_address_are_limited_and_refusals_logged_once_in_a_while():
    with EmbeddedBroker(config={"max.connections.per.ip": 3}) as own:
        held = [socket.create_connection(("127.0.0.1", own.port)) for _ in range(3)]
        refused = [socket.create_connection(("127.0.0.1", own.port)) for _ in range(40)]
        assert all(closed_by_broker(sock) for sock in refused)
        other = socket.socket()
        other.bind(("127.0.0.2", 0))
        other.connect(("127.0.0.1", own.port))
        other.settimeout(1)
        with pytest.raises(TimeoutError):
            other.recv(1)  # another address is still served: its connection stays open
        assert logged(own, "max.connections.per.ip=3 reached")
        assert own.log_path.read_text().count("refusing connection") <= 2
        for sock in [*held, *refused, other]:
            sock.close()


def test_a_full_broker_closes_its_longest_idle_connection_for_a_new_client():
    with EmbeddedBroker(config={"max.connections": 3}) as own:
        held = [WireClient(own.bootstrap_servers) for _ in range(3)]
        for client in held:  # held[0] has waited longest for its next request
            assert client.send(metadata_request([])).brokers
            time.sleep(0.2)
        with WireClient(own.bootstrap_servers) as newcomer:
            assert newcomer.send(metadata_request([])).brokers
        with pytest.raises(BrokerUnavailableError):
            held[0].send(metadata_request([]))
        assert all(client.send(metadata_request([])).brokers for client in held[1:])
        assert logged(own, "max.connections=3 reached: closing the connection idle longest")
        # connections in the middle of a request are not closed for a newcomer: it is refused
        for client in held:
            client.close()
        busy = [socket.create_connection(("127.0.0.1", own.port)) for _ in range(3)]
        for sock in busy:
            sock.sendall(struct.pack(">i", 100) + b"\0" * 10)  # a frame begun, not finished
        time.sleep(0.5)
        refused = socket.create_connection(("127.0.0.1", own.port))
        assert closed_by_broker(refused)
        busy[0].settimeout(1)
        with pytest.raises(TimeoutError):
            busy[0].recv(1)
        for sock in [*busy, refused]:
            sock.close()


def _metadata_frame(names: int, auto_create: bool) -> bytes:
    """A Metadata v12 request frame naming `names` topics that do not exist."""
    request = metadata_request([f"absent-{i:08d}" for i in range(names)], auto_create)
    body = io.BytesIO()
    entity_writer(metadata.RequestHeader)(body, metadata.RequestHeader(
        request_api_key=i16(3), request_api_version=i16(12), correlation_id=i32(1), client_id="big"))
    entity_writer(metadata.MetadataRequest)(body, request)
    return struct.pack(">i", len(body.getvalue())) + body.getvalue()


@pytest.mark.slow
def test_large_metadata_requests_are_bounded_and_do_not_stall_other_clients():
    with EmbeddedBroker(config={"auto.create.topics.enable": "false"}) as own:
        big = socket.create_connection(("127.0.0.1", own.port), timeout=60)
        big.sendall(_metadata_frame(100_000, auto_create=False))  # ~2 MB: served, off the event loop
        served_meanwhile = 0
        with WireClient(own.bootstrap_servers) as small:
            big.setblocking(False)
            while True:
                try:
                    if big.recv(1):
                        break
                except BlockingIOError:
                    pass
                assert small.send(metadata_request([])).brokers
                served_meanwhile += 1
        big.close()
        assert served_meanwhile > 3, "other clients were served while the large request was handled"
        huge = socket.create_connection(("127.0.0.1", own.port), timeout=30)
        huge.sendall(struct.pack(">ihhi", 13 << 20, 3, 12, 1) + bytes(100_000))  # 13 MB of Metadata
        assert closed_by_broker(huge)
        assert logged(own, "requests other than Produce may have at most")


def test_requests_larger_than_the_request_memory_are_still_served():
    with EmbeddedBroker(config={"queued.max.request.bytes": 100_000}) as own:
        clients.create_topics(own.bootstrap_servers, {"big": 1})
        batch = build_batch([(b"k", bytes(400_000))], now_ms())
        assert produce_raw(own.bootstrap_servers, "big", batch) == (ErrorCode.none, 0)
        with WireClient(own.bootstrap_servers) as client:  # decoded off the loop: 24x its size
            answer = client.send(metadata_request([f"absent-{i:06d}" for i in range(20_000)], False))
        assert len(answer.topics) == 20_000


@pytest.mark.slow
def test_creating_many_partitions_does_not_stall_other_clients():
    with EmbeddedBroker() as own:
        request = create_topics.CreateTopicsRequest(  # 8000 partitions fit a limit of 20,000 files
            topics=(create_topics.CreatableTopic(name="wide", num_partitions=i32(8000),
                                                 replication_factor=i16(1), assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=60), validate_only=False)
        bootstrap = own.bootstrap_servers
        with WireClient(bootstrap, timeout=120) as big, WireClient(bootstrap) as small:
            correlation_id = big.send_only(request)
            served_meanwhile = 0
            while not _readable(big):
                assert small.send(metadata_request([])).brokers
                served_meanwhile += 1
            assert big.receive(request, correlation_id).topics[0].error_code == ErrorCode.none
        assert served_meanwhile > 3, "other clients were served while the partitions were created"


def _readable(client: WireClient) -> bool:
    return bool(select.select([client._socket], [], [], 0)[0])


def _produce_frame(topic: str, records: bytes, correlation_id: int) -> bytes:
    body = io.BytesIO()
    entity_writer(produce.RequestHeader)(body, produce.RequestHeader(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(correlation_id),
        client_id="big"))
    entity_writer(produce.ProduceRequest)(body, _produce_request(topic, records))
    return struct.pack(">i", len(body.getvalue())) + body.getvalue()


def test_two_requests_that_together_exceed_the_request_memory_do_not_wait_on_each_other():
    """Each frame's memory grows as its bytes arrive: two frames both half read can hold the whole
    budget while each waits for more. One of them may go beyond the budget, or neither would end."""
    with EmbeddedBroker(config={"queued.max.request.bytes": 1_100_000}) as own:
        clients.create_topics(own.bootstrap_servers, {"big": 1})
        frames = [_produce_frame("big", build_batch([(b"k", bytes(700_000))], now_ms()), i) for i in (1, 2)]
        socks = [socket.create_connection(("127.0.0.1", own.port), timeout=30) for _ in frames]
        for sock, frame in zip(socks, frames, strict=True):
            sock.sendall(frame[:300_000])  # each now holds 512 KiB of the budget
        time.sleep(0.5)
        senders = [threading.Thread(target=sock.sendall, args=(frame[300_000:],))
                   for sock, frame in zip(socks, frames, strict=True)]
        for sender in senders:
            sender.start()
        answered = [sock.recv(4) for sock in socks]  # a timeout here is the deadlock
        for sender in senders:
            sender.join()
        for sock in socks:
            sock.close()
        assert all(len(size) == 4 for size in answered)
        assert clients.admin(own.bootstrap_servers).list_topics("big", timeout=10).topics["big"]
        consumer = clients.consumer(own.bootstrap_servers, **{"group.id": unique("g")})
        low, high = consumer.get_watermark_offsets(TopicPartition("big", 0), timeout=10)
        consumer.close()
        assert (low, high) == (0, 2)
