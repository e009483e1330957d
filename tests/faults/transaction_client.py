"""A plain transactional Kafka client (confluent-kafka), run on a host of its own by
test_broker_transaction.py: ``python transaction_client.py BOOTSTRAP TOPIC TRANSACTIONAL_ID``.

It opens a transaction and writes ``open-<i>`` records (acknowledged), prints ``open``, then waits for a
line on stdin (the test cuts it off from the broker meanwhile, long past ``transaction.timeout.ms``, and
heals). Then it tries to commit, recovers as a Kafka application must (abort and retry on an abortable
error; a new producer of the same ``transactional.id`` on a fatal one), commits ``after-<i>`` records
and prints one JSON line: what the commit of the timed-out transaction answered and how it recovered.
"""

from __future__ import annotations

import json
import sys

from confluent_kafka import KafkaException, Producer

RECORDS = 5


def new_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 6000, "message.timeout.ms": 6000,
                         "socket.timeout.ms": 5000})
    producer.init_transactions(60)
    return producer


def write(producer: Producer, topic: str, prefix: str) -> None:
    for i in range(RECORDS):
        producer.produce(topic, f"{prefix}-{i}".encode(), b"k")
    assert producer.flush(30) == 0, "records not acknowledged"


def commit_after(producer: Producer, bootstrap: str, topic: str, transactional_id: str) -> dict[str, object]:
    try:
        producer.commit_transaction(60)
        answer: dict[str, object] = {"commit": "committed"}
    except KafkaException as exception:
        error = exception.args[0]
        answer = {"commit": error.name(), "fatal": error.fatal(), "abortable": error.txn_requires_abort(),
                  "retriable": error.retriable()}
        if error.txn_requires_abort():
            producer.abort_transaction(60)
            answer["recovery"] = "aborted, same producer"
        else:
            producer = new_producer(bootstrap, transactional_id)
            answer["recovery"] = "new producer"
    producer.begin_transaction()
    write(producer, topic, "after")
    producer.commit_transaction(60)
    return answer


def main(bootstrap: str, topic: str, transactional_id: str) -> None:
    producer = new_producer(bootstrap, transactional_id)
    producer.begin_transaction()
    write(producer, topic, "open")
    print("open", flush=True)
    sys.stdin.readline()
    print(json.dumps(commit_after(producer, bootstrap, topic, transactional_id)), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
