"""A read-process-write loop with confluent-kafka transactions; the kill -9 test runs and kills it.

Usage: rpw_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PARTITIONS
Prints "ready" once it is about to process; exits 0 once every input record is processed and
committed; any error exits non-zero (the test restarts it, as an orchestrator would).
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from strom.kafka import clients

BATCH = 10


def main(bootstrap: str, source: str, sink: str, group: str, txn_id: str, partitions: int) -> int:
    producer = clients.producer(bootstrap, **{"transactional.id": txn_id, "transaction.timeout.ms": 10000})
    producer.init_transactions(30)  # fences the previous incarnation and aborts its open transaction
    consumer = clients.consumer(bootstrap, group)
    wanted = [TopicPartition(source, p) for p in range(partitions)]
    committed = consumer.committed(wanted, 30)
    consumer.assign([TopicPartition(source, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                     for tp in committed])
    ends = {p: consumer.get_watermark_offsets(TopicPartition(source, p), 10)[1] for p in range(partitions)}
    done = {tp.partition: max(tp.offset, 0) for tp in committed}
    print("ready", flush=True)
    while any(done[p] < ends[p] for p in ends):
        messages = [m for m in consumer.consume(BATCH, 1.0) if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(sink, key=message.key(), value=b"processed:" + message.value(),
                             partition=message.partition())
            done[message.partition()] = message.offset() + 1
        time.sleep(0.02)  # widen the window in which a kill lands mid-transaction
        producer.send_offsets_to_transaction([TopicPartition(source, p, o) for p, o in done.items()],
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    consumer.close()
    return 0


if __name__ == "__main__":
    bootstrap, source, sink, group, txn_id, partitions = sys.argv[1:7]
    sys.exit(main(bootstrap, source, sink, group, txn_id, int(partitions)))
