"""Produce and consume throughput of the strom broker with confluent-kafka (acks=all, idempotent).

Usage: .venv/bin/python bench/broker_throughput.py [--records-100b N] [--records-1kb N]
                                                   [--partitions P] [--clients C]
Prints records/s and MB/s for produce and consume, for 100 B and 1 KB records. C client processes
share the partitions (Python clients are CPU-bound: one process cannot saturate the broker). The
CPU seconds of the broker and of the clients are printed too: on a shared machine they show where
the time went.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from strom.broker import EmbeddedBroker
from strom.kafka import clients

PRODUCER_TUNING = {"linger.ms": 20, "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                   "queue.buffering.max.messages": 2_000_000}
CONSUMER_TUNING = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                   "queued.max.messages.kbytes": 1_048_576, "isolation.level": "read_uncommitted"}
BATCH = 10_000


def produce(bootstrap: str, topic: str, partitions: list[int], count: int, size: int) -> None:
    """Produces `count` records to `partitions` (produce_batch, all deliveries awaited)."""
    producer = clients.producer(bootstrap, **PRODUCER_TUNING)
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


def consume(bootstrap: str, topic: str, partitions: list[int], count: int, _size: int) -> None:
    """Reads `count` records from the start of `partitions`."""
    consumer = clients.consumer(bootstrap, None, **CONSUMER_TUNING)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    received = 0
    while received < count:
        received += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    consumer.close()


def _client(job: tuple, barrier, results) -> None:
    """One client process: its share of the work after the barrier; reports (start, end, CPU s)."""
    kind, bootstrap, topic, partitions, count, size = job
    barrier.wait()
    cpu_before, start = _cpu(), time.time()
    {"produce": produce, "consume": consume}[kind](bootstrap, topic, partitions, count, size)
    results.put((start, time.time(), _cpu() - cpu_before))


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
    barrier, queue = context.Barrier(clients_count), context.Queue()
    processes = [context.Process(target=_client, args=(job, barrier, queue)) for job in jobs]
    broker_before = _broker_cpu(broker.pid or 0)
    for process in processes:
        process.start()
    results = [queue.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    broker_cpu = _broker_cpu(broker.pid or 0) - broker_before
    seconds = max(end for _, end, _ in results) - min(start for start, _, _ in results)
    client_cpu = sum(cpu for _, _, cpu in results)
    megabytes = count * size / 1e6
    print(f"{kind} {size:>4} B  {count / seconds:>10,.0f} records/s {megabytes / seconds:>7.1f} MB/s   "
          f"({count:,} in {seconds:.2f} s, {clients_count} client process(es); CPU s: "
          f"broker {broker_cpu:.2f}, clients {client_cpu:.2f}; "
          f"broker {megabytes / max(broker_cpu, 0.01):,.0f} MB per CPU s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records-100b", type=int, default=1_000_000)
    parser.add_argument("--records-1kb", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        for size, count in ((100, args.records_100b), (1000, args.records_1kb)):
            topic = f"bench-{size}"
            clients.create_topics(broker.bootstrap_servers, {topic: args.partitions})
            for kind in ("produce", "consume"):
                run(kind, broker, topic, args.partitions, args.clients, count, size)


if __name__ == "__main__":
    main()
