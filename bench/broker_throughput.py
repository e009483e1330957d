"""Produce and consume throughput of the strom broker with confluent-kafka (acks=all, idempotent).

Usage: .venv/bin/python bench/broker_throughput.py [--records-100b N] [--records-1kb N] [--partitions P]
Prints records/s and MB/s for produce and consume, for 100 B and 1 KB records, and the CPU seconds
the broker and this client process used: on a shared machine the CPU figures show where time goes.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from strom.broker import EmbeddedBroker
from strom.kafka import clients

PRODUCER_TUNING = {"linger.ms": 20, "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                   "queue.buffering.max.messages": 2_000_000}
BATCH = 10_000
CONSUMER_TUNING = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                   "queued.max.messages.kbytes": 1_048_576, "isolation.level": "read_uncommitted"}


def produce(bootstrap: str, topic: str, partitions: int, count: int, size: int) -> float:
    """Seconds to produce `count` records (produce_batch per partition, delivery awaited)."""
    producer = clients.producer(bootstrap, **PRODUCER_TUNING)
    value = b"x" * size
    chunk = [{"value": value, "key": b"%d" % i} for i in range(BATCH)]
    start = time.perf_counter()
    sent = 0
    while sent < count:
        messages = chunk[:min(BATCH, count - sent)]
        partition = (sent // BATCH) % partitions
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
    return time.perf_counter() - start


def consume(bootstrap: str, topic: str, partitions: int, count: int) -> float:
    consumer = clients.consumer(bootstrap, None, **CONSUMER_TUNING)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    start = time.perf_counter()
    received = 0
    while received < count:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                received += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def _broker_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client_cpu() -> float:
    times = os.times()
    return times.user + times.system


def measure(label: str, count: int, size: int, broker_pid: int, run: Callable[[], float]) -> None:
    broker_before, client_before = _broker_cpu(broker_pid), _client_cpu()
    seconds = run()
    broker_cpu, client_cpu = _broker_cpu(broker_pid) - broker_before, _client_cpu() - client_before
    megabytes = count * size / 1e6
    print(f"{label:<16} {count / seconds:>10,.0f} records/s {megabytes / seconds:>7.1f} MB/s   "
          f"({count:,} in {seconds:.2f} s; CPU s: broker {broker_cpu:.2f}, client {client_cpu:.2f}; "
          f"broker {megabytes / max(broker_cpu, 0.01):,.0f} MB per CPU s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records-100b", type=int, default=1_000_000)
    parser.add_argument("--records-1kb", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        for size, count in ((100, args.records_100b), (1000, args.records_1kb)):
            topic = f"bench-{size}"
            clients.create_topics(bootstrap, {topic: args.partitions})
            pid = broker.pid
            assert pid is not None
            measure(f"produce {size} B", count, size, pid,
                    lambda: produce(bootstrap, topic, args.partitions, count, size))  # noqa: B023
            measure(f"consume {size} B", count, size, pid,
                    lambda: consume(bootstrap, topic, args.partitions, count))  # noqa: B023


if __name__ == "__main__":
    main()
