"""Cost of transactions: transactional versus idempotent-only produce throughput on the strom broker.

Three producers with the same settings (linger.ms=5, a local queue of --queue records) send 1 KB
records as fast as librdkafka takes them to --partitions topics:
  idempotent          free-running, flushed only at the end of a run
  idempotent+flush    flushed every --commit-ms: the same synchronous points as the transactions
  transactional       a transaction committed every --commit-ms (100 ms by default): each adds
                      AddPartitionsToTxn, the drain of the queue, EndTxn and one marker per partition
They take turns in --rounds rounds of --seconds each (after a warm-up; the order rotates), so load
from other processes hits all alike. Prints records/s and the ratios (target: transactional /
idempotent >= 0.85); transactional / idempotent+flush is the cost of the transaction protocol
alone. Ratios are given overall and as the median of the rounds (robust to a round hit by load).

    .venv/bin/python bench/eos_overhead.py [--seconds 2] [--rounds 6] [--partitions 4] [--commit-ms 100]
    .venv/bin/python bench/eos_overhead.py --bootstrap-servers host:9092   # an existing broker
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Producer

from strom.broker import EmbeddedBroker
from strom.kafka import clients

RECORD = b"x" * 1024


@dataclass
class Case:
    name: str
    producer: Producer
    topic: str
    mode: str  # "free", "flush" or "transactions"
    sent: int = 0
    seconds: float = 0.0
    syncs: int = 0

    def run(self, seconds: float, every_ms: int) -> float:
        """Sends for `seconds`; every `every_ms` flushes or commits unless free-running; returns records/s."""
        started, sent_before = time.monotonic(), self.sent
        while time.monotonic() - started < seconds:
            if self.mode == "transactions":
                self.producer.begin_transaction()
            opened = time.monotonic()
            while (time.monotonic() - opened) * 1000 < every_ms or self.mode == "free":
                self.sent += _send_some(self.producer, self.topic)
                if time.monotonic() - started >= seconds:
                    break
            if self.mode == "transactions":
                self.producer.commit_transaction(60)
            elif self.mode == "flush":
                assert self.producer.flush(60) == 0
            self.syncs += 1
        assert self.producer.flush(60) == 0
        took = time.monotonic() - started
        self.seconds += took
        return (self.sent - sent_before) / took

    @property
    def rate(self) -> float:
        return self.sent / self.seconds


def _send_some(producer: Producer, topic: str, count: int = 100) -> int:
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, RECORD)
                break
            except BufferError:  # the local queue is full: let deliveries catch up
                producer.poll(0.01)
    producer.poll(0)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument("--queue", type=int, default=10_000, help="queue.buffering.max.messages")
    parser.add_argument("--bootstrap-servers", help="use this broker instead of starting an embedded one")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers or stack.enter_context(EmbeddedBroker()).bootstrap_servers
        settings = {"linger.ms": 5, "queue.buffering.max.messages": args.queue}
        cases = []
        for name, mode in (("idempotent", "free"), ("idempotent+flush", "flush"),
                           ("transactional", "transactions")):
            topic = f"eos-bench-{mode}-{uuid.uuid4().hex[:6]}"
            clients.create_topics(bootstrap, {topic: args.partitions})
            extra = {"transactional.id": f"eos-bench-{uuid.uuid4().hex}"} if mode == "transactions" else {}
            producer = clients.producer(bootstrap, **settings, **extra)
            if extra:
                producer.init_transactions(30)
            cases.append(Case(name, producer, topic, mode))
        for case in cases:  # warm-up: connections, metadata, page cache
            case.run(1.0, args.commit_ms)
            case.sent, case.seconds, case.syncs = 0, 0.0, 0
        ratios, protocol_ratios = [], []
        for round_ in range(args.rounds):
            rates = {case.name: case.run(args.seconds, args.commit_ms)
                     for case in cases[round_ % 3:] + cases[:round_ % 3]}
            ratios.append(rates["transactional"] / rates["idempotent"])
            protocol_ratios.append(rates["transactional"] / rates["idempotent+flush"])
    idempotent, flushed, transactional = cases
    print(f"1 KB records, {args.partitions} partitions, {args.rounds} x {args.seconds:.0f} s per producer")
    for case in cases:
        print(f"{case.name:<17}: {case.rate:10,.0f} records/s")
    print(f"transactions committed: {transactional.syncs} (one per {args.commit_ms} ms of sending)")
    print(f"ratio transactional / idempotent       : {transactional.rate / idempotent.rate:5.2f} overall, "
          f"{statistics.median(ratios):5.2f} median of rounds  (target >= 0.85)")
    print(f"ratio transactional / idempotent+flush : {transactional.rate / flushed.rate:5.2f} overall, "
          f"{statistics.median(protocol_ratios):5.2f} median of rounds")


if __name__ == "__main__":
    main()
