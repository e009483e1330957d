"""Produce and consume throughput of the strom broker with confluent-kafka (acks=all, idempotent).

Usage: .venv/bin/python bench/broker_throughput.py [--records-100b N] [--records-1kb N]
                                                   [--partitions P] [--clients C] [--consumers K]
Prints records/s and MB/s for produce and consume, for 100 B and 1 KB records. C producer and K
consumer processes share the partitions (Python clients are CPU-bound: one process cannot saturate
the broker; K = P is one consumer per partition, as deployments run). Clocks start once every
client is connected. The `fetch` line reads the same records with plain Fetch requests whose
records nobody parses: the broker's side of consuming, without librdkafka's per-record cost.
The CPU seconds of the broker and of the clients are printed too, and the broker's CPU seconds
per GB moved: on a shared machine they show where the time went.
"""

from __future__ import annotations

import argparse
import datetime
import io
import multiprocessing
import os
import socket
import struct
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kio.schema.fetch.v4 import request as fetch
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i64

from strom.broker import EmbeddedBroker
from strom.kafka import clients

PRODUCER_TUNING = {"linger.ms": 20, "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                   "queue.buffering.max.messages": 2_000_000}
# queued.min.messages: at librdkafka's default (100k) a partition whose queue is full is not
# fetched again for fetch.queue.backoff.ms (1 s), which stalls the 100 B run.
CONSUMER_TUNING = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                   "queued.max.messages.kbytes": 1_048_576, "queued.min.messages": 1_000_000,
                   "isolation.level": "read_uncommitted"}
BATCH = 10_000
_BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
CONSUME_BATCH = 500  # measured: fewer client CPU seconds than batches of 10k (less memory touched)


def produce(producer: Producer, topic: str, partitions: list[int], count: int, size: int) -> None:
    """Produces `count` records to `partitions` (produce_batch, all deliveries awaited)."""
    value = b"x" * size
    chunk = [{"value": value} for _ in range(BATCH)]  # partition chosen per batch: no key needed
    sent = 0
    while sent < count:
        messages = chunk[:min(BATCH, count - sent)]
        partition = partitions[(sent // BATCH) % len(partitions)]
        queued = 0
        while queued < len(messages):
            try:
                queued += producer.produce_batch(topic, messages[queued:], partition=partition)
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
        sent += len(messages)
    if producer.flush(300) != 0:
        raise RuntimeError("records were not acknowledged")


def consume(consumer: Consumer, topic: str, partitions: list[int], count: int, _size: int) -> None:
    """Reads `count` records from the start of `partitions`."""
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    received = 0
    while received < count:
        wanted = min(CONSUME_BATCH, count - received)  # a batch that cannot fill waits the timeout
        received += sum(1 for m in consumer.consume(wanted, 1.0) if m.error() is None)


class RawFetcher:
    """Fetch v4 over a plain socket, read into one reused buffer and walked in place (batch headers
    only): what the broker serves when no client library parses the records."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.buffer = bytearray(64 << 20)

    def fetch(self, topic: str, offsets: dict[int, int]) -> dict[int, tuple[int, int]]:
        """partition -> (offset after the last complete batch, records in complete batches)."""
        self._send(fetch.FetchRequest(
            max_wait=datetime.timedelta(milliseconds=500), min_bytes=i32(1), max_bytes=i32(52_428_800),
            topics=(fetch.FetchTopic(topic=topic, partitions=tuple(
                fetch.FetchPartition(partition=i32(p), fetch_offset=i64(offset),
                                     partition_max_bytes=i32(10_485_760))
                for p, offset in offsets.items())),)))
        frame = self._receive()
        position = 12  # correlation id, throttle time, topic count (one topic)
        position += 2 + _I16.unpack_from(frame, position)[0] + 4  # topic name, partition count
        result = {}
        for _ in offsets:
            partition = _I32.unpack_from(frame, position)[0]
            aborted = _I32.unpack_from(frame, position + 22)[0]
            position += 26 + 16 * max(aborted, 0)
            size = _I32.unpack_from(frame, position)[0]
            result[partition] = _walk_batches(frame[position + 4:position + 4 + max(size, 0)])
            position += 4 + max(size, 0)
        return result

    def _send(self, request: fetch.FetchRequest) -> None:
        out = io.BytesIO()
        entity_writer(RequestHeader)(out, RequestHeader(request_api_key=i16(1), request_api_version=i16(4),
                                                        correlation_id=i32(1), client_id="bench"))
        entity_writer(fetch.FetchRequest)(out, request)
        self.sock.sendall(_I32.pack(out.tell()) + out.getvalue())

    def _receive(self) -> memoryview:
        size = _I32.unpack(self._read(4))[0]
        return self._read(size)

    def _read(self, size: int) -> memoryview:
        view = memoryview(self.buffer)[:size]
        filled = 0
        while filled < size:
            got = self.sock.recv_into(view[filled:])
            if not got:
                raise ConnectionError("the broker closed the connection")
            filled += got
        return view

    def close(self) -> None:
        self.sock.close()


def fetch_raw(fetcher: RawFetcher, topic: str, partitions: list[int], count: int, _size: int) -> None:
    """Reads `count` records from the start of `partitions` with plain Fetch requests."""
    offsets = dict.fromkeys(partitions, 0)
    received = 0
    while received < count:
        for partition, (next_offset, records) in fetcher.fetch(topic, offsets).items():
            offsets[partition] = max(offsets[partition], next_offset)
            received += records


def _walk_batches(data: memoryview) -> tuple[int, int]:
    """(offset after the last complete batch, records in complete batches) of a records field."""
    position = next_offset = records = 0
    while position + _BATCH_HEAD.size <= len(data):
        base_offset, length = _BATCH_HEAD.unpack_from(data, position)
        if position + 12 + length > len(data):
            break  # a partial batch at the end of a size-limited read
        next_offset = base_offset + _I32.unpack_from(data, position + 23)[0] + 1  # lastOffsetDelta
        records += _I32.unpack_from(data, position + 57)[0]
        position += 12 + length
    return next_offset, records


def _client(job: tuple, barrier, results) -> None:
    """One client process: connects, then does its share of the work after the barrier; reports
    (start, end, CPU s)."""
    kind, bootstrap, topic, partitions, count, size = job
    if kind == "produce":
        client, work = clients.producer(bootstrap, **PRODUCER_TUNING), produce
    elif kind == "consume":
        client, work = clients.consumer(bootstrap, None, **CONSUMER_TUNING), consume
    else:
        client, work = RawFetcher(bootstrap), fetch_raw
    if kind != "fetch":
        client.list_topics(topic, timeout=30)  # connection and metadata are not part of the figure
    barrier.wait()
    cpu_before, start = _cpu(), time.time()
    work(client, topic, partitions, count, size)
    results.put((start, time.time(), _cpu() - cpu_before))
    if kind != "produce":
        client.close()


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def _broker_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(kind: str, broker: EmbeddedBroker, topic: str, partitions: int, clients_count: int,
        count: int, size: int) -> None:
    shares = [[p for p in range(partitions) if p % clients_count == c] for c in range(clients_count)]
    if kind == "produce":
        counts = [count // clients_count + (c < count % clients_count) for c in range(clients_count)]
    else:
        consumer = clients.consumer(broker.bootstrap_servers, None)
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
        consumer.close()
        counts = [sum(ends[p] for p in share) for share in shares]
    jobs = [(kind, broker.bootstrap_servers, topic, share, n, size)
            for share, n in zip(shares, counts, strict=True)]
    context = multiprocessing.get_context("spawn")
    barrier, queue = context.Barrier(clients_count + 1), context.Queue()
    processes = [context.Process(target=_client, args=(job, barrier, queue)) for job in jobs]
    for process in processes:
        process.start()
    barrier.wait(timeout=120)  # every client is connected
    broker_before = _broker_cpu(broker.pid or 0)
    results = [queue.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    broker_cpu = _broker_cpu(broker.pid or 0) - broker_before
    seconds = max(end for _, end, _ in results) - min(start for start, _, _ in results)
    client_cpu = sum(cpu for _, _, cpu in results)
    megabytes = count * size / 1e6
    print(f"{kind:<7} {size:>4} B  {count / seconds:>10,.0f} records/s {megabytes / seconds:>7.1f} MB/s   "
          f"({count:,} in {seconds:.2f} s, {clients_count} client process(es); CPU s: "
          f"broker {broker_cpu:.2f}, clients {client_cpu:.2f}; "
          f"broker {broker_cpu / (megabytes / 1000):.2f} CPU s per GB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records-100b", type=int, default=1_000_000)
    parser.add_argument("--records-1kb", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--clients", type=int, default=2, help="producer processes")
    parser.add_argument("--consumers", type=int, default=2, help="consumer processes")
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        for size, count in ((100, args.records_100b), (1000, args.records_1kb)):
            topic = f"bench-{size}"
            clients.create_topics(broker.bootstrap_servers, {topic: args.partitions})
            run("produce", broker, topic, args.partitions, args.clients, count, size)
            run("consume", broker, topic, args.partitions, args.consumers, count, size)
            run("fetch", broker, topic, args.partitions, args.consumers, count, size)


if __name__ == "__main__":
    main()
