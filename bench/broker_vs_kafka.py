"""strom broker against Apache Kafka on the same machine, with the same confluent-kafka clients.

Usage: .venv/bin/python bench/broker_vs_kafka.py [--scale S] [--rounds R] [--partitions P] [--sasl-ssl]
                                                 [--strom-config KEY=VALUE ...]

One Apache Kafka node (tests/support/apache_kafka.py, `make kafka` first) and one strom broker run
side by side; every workload runs on both, alternating which goes first each round, so that the
machine's load (shared, noisy) falls on both alike:

- produce 1 KB and 100 B records, acks=all, idempotent (strom's client defaults): MB/s, the p99
  of librdkafka's per-record produce latency (queueing included: the producer runs flat out) and
  the broker process's CPU seconds per GB produced (on 2 cores the client and the broker share the
  machine, so a broker's CPU per GB bounds the throughput, and shows what TLS costs each broker);
- a consumer reading the 1 KB topic from the start (1 GB at --scale 1), and one reading a topic of
  the same records written in full batches: a broker that acks faster gets smaller batches from
  the same producer (linger.ms 5), and a consumer's client pays per batch, so the second figure
  compares the brokers' consume paths on the same batches (records per batch are printed);
- the plain exactly-once read-process-write loop: a read_committed consumer in a group, a
  transactional producer, one transaction per poll of up to 500 records with the offsets sent to
  it; records/s once the group is assigned.

With --sasl-ssl a second pair joins: a secured Apache Kafka node and a secured strom broker (SASL_SSL,
SCRAM-SHA-512, ACLs on; the client is a super user), so each is also measured against its own
PLAINTEXT figure (TLS's cost to each, and their ratio), in the table from the rounds' medians and
below it round by round.

Prints one table with strom / Kafka ratios (for p99 and CPU, Kafka / strom: above 1 means strom is
better),
the load average before and after, and each round's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic

from strom.broker import EmbeddedBroker
from strom.kafka import clients

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.apache_kafka import KafkaCluster

GB = 1 << 30
PRODUCER_TUNING = {"linger.ms": 5, "queue.buffering.max.kbytes": 1_048_576,
                   "queue.buffering.max.messages": 1_000_000}
CONSUMER_TUNING = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                   "queued.max.messages.kbytes": 1_048_576, "queued.min.messages": 1_000_000}
FULL_BATCHES = {"linger.ms": 1000, "batch.num.messages": 100_000}
"""A producer whose batches close when batch.size (1 MB) fills, however fast the broker acks."""
EOS_BATCH = 500


class Target:
    def __init__(self, name: str, bootstrap_servers: str, log_dirs: Path, pid: int,
                 settings: dict[str, str] | None = None) -> None:
        self.name = name
        self.pid = pid  # the broker's process
        self.bootstrap_servers = bootstrap_servers
        self.log_dirs = log_dirs  # where the broker keeps its segment files
        self.settings = settings or {}  # security settings, given to every client
        self.admin = clients.admin(bootstrap_servers, **self.settings)
        self.topics = 0

    def topic(self, partitions: int) -> str:
        self.topics += 1
        name = f"bench-{self.topics}-{os.getpid()}"
        self.admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            topic = self.admin.list_topics(name, timeout=10).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return name
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not appear on {self.name}")


def produce(target: Target, topic: str, partitions: int, count: int, size: int,
            tuning: dict[str, int] = PRODUCER_TUNING) -> dict[str, float]:
    """`count` records of `size` bytes, round robin over the partitions; MB/s and p99 latency (ms)."""
    producer = clients.producer(target.bootstrap_servers, **{**PRODUCER_TUNING, **tuning}, **target.settings)
    latencies: list[float] = []

    def delivered(error, message) -> None:
        if error is not None:
            raise RuntimeError(f"delivery failed on {target.name}: {error}")
        latencies.append(message.latency())

    value = b"x" * size
    clients.produce(producer, topic, value, partition=0)  # connected, producer id assigned: then time
    producer.flush(60)
    latencies.clear()
    start, broker_start = time.perf_counter(), cpu_seconds(target.pid)
    for i in range(count):
        clients.produce(producer, topic, value, partition=i % partitions, on_delivery=delivered)
        if i % 1000 == 999:
            producer.poll(0)
    producer.flush(600)
    elapsed, broker_cpu = time.perf_counter() - start, cpu_seconds(target.pid) - broker_start
    assert len(latencies) == count, f"{len(latencies)} of {count} delivered on {target.name}"
    latencies.sort()
    return {"MB/s": count * size / elapsed / 1e6, "p99 ms": latencies[int(0.99 * (count - 1))] * 1000,
            "CPU s/GB": broker_cpu / (count * size / 1e9)}


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (Linux: /proc/<pid>/stat), all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def consume(target: Target, topic: str, partitions: int, count: int, size: int) -> dict[str, float]:
    consumer = clients.consumer(target.bootstrap_servers, **CONSUMER_TUNING, **target.settings)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    received = 0
    start = None
    deadline = time.monotonic() + 1200
    while received < count and time.monotonic() < deadline:
        for message in consumer.consume(500, 1.0):
            if message.error() is None:
                received += 1
                if start is None:
                    start = time.perf_counter()
    elapsed = time.perf_counter() - start
    consumer.close()
    assert received >= count, f"{received} of {count} read on {target.name}"
    return {"MB/s": count * size / elapsed / 1e6}


def records_per_batch(target: Target, topic: str, count: int) -> float:
    """From the topic's segment files (Kafka: `<topic>-<p>/`, strom: `<topic>/<p>/`): batch headers
    only, each batch's length at bytes 8-11."""
    batches = 0
    for segment in target.log_dirs.rglob("*.log"):
        if topic not in (segment.parent.name.rsplit("-", 1)[0], segment.parent.parent.name):
            continue
        data = segment.read_bytes()
        position = 0
        while position + 12 <= len(data) and (length := struct.unpack_from(">i", data, position + 8)[0]) > 0:
            position += 12 + length
            batches += 1
    return count / max(batches, 1)


def eos_loop(target: Target, partitions: int, count: int) -> dict[str, float]:
    """The read-process-write loop of an exactly-once application over `count` 100 B records."""
    source, sink = target.topic(partitions), target.topic(partitions)
    filler = clients.producer(target.bootstrap_servers, **PRODUCER_TUNING, **target.settings)
    for i in range(count):
        clients.produce(filler, source, b"x" * 100, partition=i % partitions)
    filler.flush(600)
    group = f"{source}-app"
    consumer = clients.consumer(target.bootstrap_servers, group, **target.settings)
    consumer.subscribe([source])
    producer = clients.producer(target.bootstrap_servers, **{"transactional.id": f"{source}-txn"},
                                **target.settings)
    producer.init_transactions(60)
    processed = transactions = 0
    start = None
    deadline = time.monotonic() + 1200
    while processed < count and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(EOS_BATCH, 0.2) if m.error() is None]
        if not batch:
            continue
        if start is None:
            start = time.perf_counter()  # the group is assigned: Kafka's initial rebalance delay is over
        producer.begin_transaction()
        for message in batch:
            clients.produce(producer, sink, message.value(), partition=message.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
        processed += len(batch)
        transactions += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    assert processed >= count, f"{processed} of {count} processed on {target.name}"
    return {"records/s": processed / elapsed, "txn/s": transactions / elapsed}


def warm_up(target: Target) -> None:
    """A fresh Kafka node creates __consumer_offsets and __transaction_state on first use."""
    eos_loop(target, 1, 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of the full sizes: 1 GB of 1 KB records (also read back), "
                             "100 MB of 100 B records, 100k records through the EOS loop")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sasl-ssl", action="store_true",
                        help="also measure a secured Kafka node and strom broker (SASL_SSL, SCRAM-SHA-512)")
    parser.add_argument("--strom-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config of both strom brokers (to compare settings run by run)")
    args = parser.parse_args()
    strom_config = dict(item.split("=", 1) for item in args.strom_config)
    n_1k = int(GB * args.scale / 1024)
    n_100 = int(100_000_000 * args.scale / 100)
    n_eos = int(100_000 * args.scale)
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as base, KafkaCluster(Path(base) / "kafka", brokers=1) as kafka, \
            EmbeddedBroker(config=strom_config) as strom, contextlib.ExitStack() as secured:
        targets = [Target("apache-kafka", kafka.bootstrap_servers, Path(base) / "kafka", kafka.pid(0)),
                   Target("strom-broker", strom.bootstrap_servers, strom.data_dir, strom.pid)]
        if args.sasl_ssl:
            targets += secured_targets(Path(base), secured, strom_config)
        for target in targets:
            warm_up(target)
        results: dict[tuple[str, str, str], list[float]] = {}

        def record(workload: str, target: Target, figures: dict[str, float]) -> None:
            for metric, value in figures.items():
                results.setdefault((workload, metric, target.name), []).append(value)
            print(f"  {workload:<26} {target.name:<13} "
                  + "  ".join(f"{k} {v:,.1f}" for k, v in figures.items()), flush=True)

        topics: dict[str, str] = {}  # the 1 KB topic of this round, per broker, read back by the consumer

        def produce_1k(target: Target) -> dict[str, float]:
            topics[target.name] = target.topic(args.partitions)
            return produce(target, topics[target.name], args.partitions, n_1k, 1024)

        def consume_1k(target: Target) -> dict[str, float]:
            per_batch = records_per_batch(target, topics[target.name], n_1k)
            return {**consume(target, topics[target.name], args.partitions, n_1k, 1024),
                    "rec/batch": per_batch}

        def consume_1k_full_batches(target: Target) -> dict[str, float]:
            topic = target.topic(args.partitions)
            produce(target, topic, args.partitions, n_1k, 1024, FULL_BATCHES)  # not timed
            return {**consume(target, topic, args.partitions, n_1k, 1024),
                    "rec/batch": records_per_batch(target, topic, n_1k)}

        def produce_100(target: Target) -> dict[str, float]:
            return produce(target, target.topic(args.partitions), args.partitions, n_100, 100)

        steps: list[tuple[str, Callable[[Target], dict[str, float]]]] = [
            ("produce 1 KB", produce_1k), ("consume 1 KB", consume_1k),
            ("consume 1 KB, 1 MB batches", consume_1k_full_batches), ("produce 100 B", produce_100),
            ("EOS loop 100 B", lambda target: eos_loop(target, args.partitions, n_eos)),
        ]
        for round_ in range(args.rounds):
            order = targets if round_ % 2 == 0 else targets[::-1]
            print(f"round {round_ + 1}: {' then '.join(t.name for t in order)} "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
            for workload, run in steps:
                for target in order:
                    record(workload, target, run(target))
        print(f"load average after: {os.getloadavg()}")
        print_table(results, args)


def secured_targets(base: Path, stack: contextlib.ExitStack, strom_config: dict[str, str]) -> list[Target]:
    """A secured Kafka node and strom broker (SASL_SSL with SCRAM-SHA-512, ACLs on), the client their
    super user."""
    from strom.broker.security.credentials import add_scram_user
    from strom.broker.security.scram import Mechanism
    from support.apache_kafka import KafkaSecurity
    from support.certificates import make_pki
    pki = make_pki(base / "pki")
    security = KafkaSecurity(pki, {"admin": "bench-admin-pw"})
    kafka = stack.enter_context(KafkaCluster(base / "kafka-secured", brokers=1, security=security))
    add_scram_user(base / "strom-secured", "admin", "bench-admin-pw", [Mechanism.SCRAM_SHA_512], 4096)
    strom = stack.enter_context(EmbeddedBroker(base / "strom-secured", config={
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(pki.broker),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "super.users": "User:admin",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer", **strom_config}))
    settings = security.sasl_settings("admin")
    return [Target("apache-kafka SASL_SSL", kafka.bootstrap_servers, base / "kafka-secured", kafka.pid(0),
                   settings),
            Target("strom-broker SASL_SSL", strom.listeners["SASL_SSL"], base / "strom-secured", strom.pid,
                   settings)]


def print_table(results: dict[tuple[str, str, str], list[float]], args: argparse.Namespace) -> None:
    print(f"\nmedian of {args.rounds} rounds, --scale {args.scale}, {args.partitions} partitions"
          + (f", strom config {args.strom_config}" if args.strom_config else ""))
    protocols = ["", " SASL_SSL"] if args.sasl_ssl else [""]
    head = "".join(f" | Kafka{p:>9} | strom{p:>9} | ratio" for p in protocols)
    tls_head = " TLS: Kafka | TLS: strom | ratio |" if args.sasl_ssl else ""
    print(f"| {'workload':<16} | {'metric':<9}{head} |{tls_head}")
    print("|" + " --- |" * (2 + 3 * len(protocols) + (3 if args.sasl_ssl else 0)))
    seen = []
    for workload, metric, _ in results:
        if (workload, metric) not in seen:
            seen.append((workload, metric))
    for workload, metric in seen:
        row, figures = [], {}
        for protocol in protocols:
            kafka = statistics.median(results[(workload, metric, "apache-kafka" + protocol)])
            strom = statistics.median(results[(workload, metric, "strom-broker" + protocol)])
            figures[protocol] = (kafka, strom)
            lower_is_better = metric.endswith(("ms", "s/GB"))
            ratio = over(kafka, strom) if lower_is_better else over(strom, kafka)  # above 1: strom is better
            row.append(f" | {kafka:>14,.1f} | {strom:>14,.1f} | {ratio:>5.2f}")
        if args.sasl_ssl:  # what TLS keeps of each broker's PLAINTEXT figure, and strom's against Kafka's
            kafka_kept = over(figures[" SASL_SSL"][0], figures[""][0])
            strom_kept = over(figures[" SASL_SSL"][1], figures[""][1])
            if lower_is_better:
                kafka_kept, strom_kept = over(1, kafka_kept), over(1, strom_kept)
            row.append(f" | {kafka_kept:>10.2f} | {strom_kept:>10.2f} | {over(strom_kept, kafka_kept):>5.2f}")
        print(f"| {workload:<16} | {metric:<9}{''.join(row)} |")
    if args.sasl_ssl:
        print_tls_rounds(results, seen)


def over(numerator: float, denominator: float) -> float:
    """A ratio, NaN when the denominator is 0 (a tiny --scale run may cost a broker under one CPU tick)."""
    return numerator / denominator if denominator else math.nan


def print_tls_rounds(results: dict[tuple[str, str, str], list[float]], seen: list[tuple[str, str]]) -> None:
    """TLS's ratio of ratios round by round: each broker's SASL_SSL figure over its PLAINTEXT one of the
    same round (minutes apart, not rounds apart, so a round in which one broker ran slow for reasons of
    the host spoils one value, not the medians of the table)."""
    print("\nTLS: strom's ratio over Kafka's, per round (throughput metrics)")
    for workload, metric in seen:
        if metric not in ("MB/s", "records/s"):
            continue
        kept = {broker: [over(tls, plain)
                         for tls, plain in zip(results[(workload, metric, broker + " SASL_SSL")],
                                               results[(workload, metric, broker)], strict=True)]
                for broker in ("apache-kafka", "strom-broker")}
        per_round = [over(strom, kafka)
                     for strom, kafka in zip(kept["strom-broker"], kept["apache-kafka"], strict=True)]
        print(f"  {workload:<26} {metric:<9} " + ", ".join(f"{r:.2f}" for r in per_round)
              + f"  (median {statistics.median(per_round):.2f})")


if __name__ == "__main__":
    main()
