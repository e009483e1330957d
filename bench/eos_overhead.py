"""Cost of transactions: transactional versus idempotent-only produce throughput on the strom broker.

Both producers send 1 KB records as fast as librdkafka takes them to a --partitions topic, with the
same settings (linger.ms=5, a local queue of --queue records); the transactional one commits every
--commit-ms (100 ms by default), so each transaction adds AddPartitionsToTxn, a drain of the queue,
EndTxn and one marker per partition. The two alternate in --rounds runs of --seconds each (after a
warm-up; who goes first alternates too), so load from other processes hits both alike. Prints
records/s and the ratio (target >= 0.85).

    .venv/bin/python bench/eos_overhead.py [--seconds 3] [--rounds 4] [--partitions 4] [--commit-ms 100]
    .venv/bin/python bench/eos_overhead.py --bootstrap-servers host:9092   # an existing broker
"""

from __future__ import annotations

import argparse
import contextlib
import time
import uuid

from confluent_kafka import Producer

from strom.broker import EmbeddedBroker
from strom.kafka import clients

RECORD = b"x" * 1024


def idempotent_run(producer: Producer, topic: str, seconds: float) -> tuple[int, float]:
    """Records sent and delivered, and the seconds it took."""
    sent, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        sent += _send_some(producer, topic)
    assert producer.flush(60) == 0
    return sent, time.monotonic() - started


def transactional_run(producer: Producer, topic: str, seconds: float,
                      commit_ms: int) -> tuple[int, float, int]:
    """Records sent and committed, the seconds it took, and the number of commits."""
    sent, commits, started = 0, 0, time.monotonic()
    while time.monotonic() - started < seconds:
        producer.begin_transaction()
        opened = time.monotonic()
        while (time.monotonic() - opened) * 1000 < commit_ms:
            sent += _send_some(producer, topic)
        producer.commit_transaction(60)
        commits += 1
    return sent, time.monotonic() - started, commits


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
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--commit-ms", type=int, default=100)
    parser.add_argument("--queue", type=int, default=10_000, help="queue.buffering.max.messages")
    parser.add_argument("--bootstrap-servers", help="use this broker instead of starting an embedded one")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers or stack.enter_context(EmbeddedBroker()).bootstrap_servers
        topics = {f"eos-bench-{kind}-{uuid.uuid4().hex[:6]}": args.partitions for kind in ("idem", "txn")}
        clients.create_topics(bootstrap, topics)
        idem_topic, txn_topic = topics
        settings = {"linger.ms": 5, "queue.buffering.max.messages": args.queue}
        idempotent = clients.producer(bootstrap, **settings)
        transactional = clients.producer(bootstrap, **settings,
                                         **{"transactional.id": f"eos-bench-{uuid.uuid4().hex}"})
        transactional.init_transactions(30)
        idempotent_run(idempotent, idem_topic, 1.0)  # warm-up: connections, metadata, page cache
        transactional_run(transactional, txn_topic, 1.0, args.commit_ms)
        idem = [0, 0.0]
        txn = [0, 0.0, 0]
        for round_ in range(args.rounds):
            runs = [lambda: idempotent_run(idempotent, idem_topic, args.seconds),
                    lambda: transactional_run(transactional, txn_topic, args.seconds, args.commit_ms)]
            for run in runs if round_ % 2 == 0 else reversed(runs):  # who goes first alternates
                result = run()
                totals = idem if len(result) == 2 else txn
                for i, value in enumerate(result):
                    totals[i] += value
    idem_rate, txn_rate, commits = idem[0] / idem[1], txn[0] / txn[1], txn[2]
    print(f"1 KB records, {args.partitions} partitions, {args.rounds} x {args.seconds:.0f} s per producer")
    print(f"idempotent only : {idem_rate:10,.0f} records/s")
    print(f"transactional   : {txn_rate:10,.0f} records/s  "
          f"({commits} commits, one per {args.commit_ms} ms)")
    print(f"ratio           : {txn_rate / idem_rate:10.2f}  (target >= 0.85)")


if __name__ == "__main__":
    main()
