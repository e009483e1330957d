"""A plain transactional Kafka client (confluent-kafka), run on a host of its own by
test_broker_transaction.py: ``python transaction_client.py BOOTSTRAP TOPIC TRANSACTIONAL_ID TIMEOUT_MS``.

It opens a transaction (``transaction.timeout.ms`` TIMEOUT_MS) and writes ``open-<i>`` records, each
acknowledged, prints ``open``, then waits for a line on stdin (the test cuts it off from the broker
meanwhile, and heals). Then it tries to commit, recovers as a Kafka application must (abort and retry
on an abortable error; a new producer of the same ``transactional.id`` on a fatal one, or when the abort
itself is fenced), commits ``after-<i>`` records and prints one JSON line: what the commit of the cut-off
transaction answered and how it recovered.

The opening must be what the test cuts off: a transaction whose records the broker took. On a loaded
machine a write can time out before the cut (``message.timeout.ms`` is at most the transaction's
timeout); then that transaction is given up and another opened, at most ``OPENINGS`` times.
"""

from __future__ import annotations

import json
import sys

from confluent_kafka import KafkaError, KafkaException, Producer

RECORDS = 5
OPENINGS = 3


def new_producer(bootstrap: str, transactional_id: str, timeout_ms: int) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": timeout_ms, "message.timeout.ms": timeout_ms,
                         "socket.timeout.ms": 5000})
    producer.init_transactions(60)
    return producer


def write(producer: Producer, topic: str, prefix: str) -> list[KafkaError]:
    """Writes the records; the errors of those the broker did not acknowledge."""
    failed: list[KafkaError] = []
    for i in range(RECORDS):
        producer.produce(topic, f"{prefix}-{i}".encode(), b"k",
                         on_delivery=lambda error, _: error is None or failed.append(error))
    assert producer.flush(60) == 0, "records neither acknowledged nor failed"
    return failed


def give_up(producer: Producer, bootstrap: str, transactional_id: str, timeout_ms: int) -> Producer:
    """Aborts the transaction; a producer that cannot (fenced: the broker aborted it on its timeout and
    bumped the epoch) is replaced by a new one of the same id."""
    try:
        producer.abort_transaction(60)
    except KafkaException as exception:
        if not exception.args[0].fatal():
            raise
        return new_producer(bootstrap, transactional_id, timeout_ms)
    return producer


def opened(bootstrap: str, topic: str, transactional_id: str, timeout_ms: int) -> tuple[Producer, int]:
    """A producer whose transaction holds ``RECORDS`` acknowledged records; how many openings it took."""
    producer = new_producer(bootstrap, transactional_id, timeout_ms)
    for attempt in range(1, OPENINGS + 1):
        producer.begin_transaction()
        failed = write(producer, topic, "open")
        if not failed:
            return producer, attempt
        print(f"opening {attempt}: {len(failed)} records failed ({failed[0]}), opening again",
              file=sys.stderr)
        producer = give_up(producer, bootstrap, transactional_id, timeout_ms)
    raise SystemExit(f"no transaction opened in {OPENINGS} attempts")


def commit_after(producer: Producer, bootstrap: str, topic: str, transactional_id: str,
                 timeout_ms: int) -> dict[str, object]:
    try:
        producer.commit_transaction(60)
        answer: dict[str, object] = {"commit": "committed"}
    except KafkaException as exception:
        error = exception.args[0]
        answer = {"commit": error.name(), "fatal": error.fatal(), "abortable": error.txn_requires_abort(),
                  "retriable": error.retriable()}
        if error.txn_requires_abort():
            replaced = give_up(producer, bootstrap, transactional_id, timeout_ms)
            answer["recovery"] = ("aborted, same producer" if replaced is producer
                                  else "abort fenced, new producer")
            producer = replaced
        else:
            producer = new_producer(bootstrap, transactional_id, timeout_ms)
            answer["recovery"] = "new producer"
    producer.begin_transaction()
    assert not write(producer, topic, "after"), "records after the recovery not acknowledged"
    producer.commit_transaction(60)
    return answer


def main(bootstrap: str, topic: str, transactional_id: str, timeout_ms: str) -> None:
    producer, openings = opened(bootstrap, topic, transactional_id, int(timeout_ms))
    print("open", flush=True)
    sys.stdin.readline()
    answer = commit_after(producer, bootstrap, topic, transactional_id, int(timeout_ms))
    print(json.dumps({**answer, "openings": openings}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
