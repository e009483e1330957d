"""Crash and restart: kill -9 during acks=all produce, committed offsets across restarts."""

from __future__ import annotations

import threading
import time

import pytest
from broker_helpers import drain
from confluent_kafka import TopicPartition

from strom.broker import EmbeddedBroker
from strom.kafka import clients

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_kill_9_during_acks_all_produce_loses_no_acknowledged_record(tmp_path):
    broker = EmbeddedBroker(data_dir=tmp_path / "data").start()
    try:
        clients.create_topics(broker.bootstrap_servers, {"crash": 2})
        acked: dict[bytes, tuple[int, int]] = {}
        producer = clients.producer(broker.bootstrap_servers, **{"message.timeout.ms": 60000,
                                                                  "linger.ms": 2})

        def delivered(error, message):
            if error is None:
                acked[message.value()] = (message.partition(), message.offset())

        stop = threading.Event()
        sent = []

        def produce_forever():
            i = 0
            while not stop.is_set():
                value = f"record-{i}".encode()
                try:
                    producer.produce("crash", key=str(i % 11).encode(), value=value, on_delivery=delivered)
                    sent.append(value)
                    i += 1
                except BufferError:
                    time.sleep(0.01)
                producer.poll(0)

        thread = threading.Thread(target=produce_forever)
        thread.start()
        while len(acked) < 3000:
            time.sleep(0.01)
        broker.kill()  # in the middle of a stream of acks=all produce requests
        acked_before_crash = dict(acked)
        time.sleep(0.5)
        broker.start()  # same data dir, same port
        time.sleep(0.5)
        stop.set()
        thread.join()
        assert producer.flush(60) == 0
    finally:
        stop.set()
        broker.stop()

    with EmbeddedBroker(data_dir=tmp_path / "data") as restarted:
        consumer = clients.consumer(restarted.bootstrap_servers, None,
                                    **{"isolation.level": "read_uncommitted"})
        ends = [consumer.get_watermark_offsets(TopicPartition("crash", p), timeout=10)[1] for p in (0, 1)]
        consumer.assign([TopicPartition("crash", p, 0) for p in (0, 1)])
        stored = drain(consumer, sum(ends))
        consumer.close()

    by_value = {m.value(): (m.partition(), m.offset()) for m in stored}
    for value, position in acked_before_crash.items():
        assert by_value.get(value) == position, f"acknowledged {value!r} at {position} is lost or moved"
    assert set(sent) <= set(by_value), "every record the producer finally acknowledged is stored"
    for p in (0, 1):
        offsets = sorted(m.offset() for m in stored if m.partition() == p)
        assert offsets == list(range(len(offsets))), "offsets stay contiguous after recovery"


def test_clean_shutdown_writes_every_index(tmp_path):
    with EmbeddedBroker(data_dir=tmp_path / "data") as broker:
        clients.create_topics(broker.bootstrap_servers, {"indexed": 2})
        producer = clients.producer(broker.bootstrap_servers)
        for i in range(200):
            producer.produce("indexed", key=str(i).encode(), value=b"v")
        assert producer.flush(10) == 0
        broker.stop()  # SIGTERM: flush and close
        for partition in (tmp_path / "data" / "topics" / "indexed").glob("[0-9]*"):
            log_file = next(partition.glob("*.log"))
            index = log_file.with_suffix(".index")
            assert index.exists() and index.stat().st_size > 0, f"{index} was not written on shutdown"
            assert log_file.with_suffix(".timeindex").stat().st_size == index.stat().st_size * 12 // 8


def test_committed_offsets_survive_restart(tmp_path):
    with EmbeddedBroker(data_dir=tmp_path / "data") as broker:
        clients.create_topics(broker.bootstrap_servers, {"kept": 3})
        consumer = clients.consumer(broker.bootstrap_servers, "survivor")
        commits = [TopicPartition("kept", p, 10 * (p + 1)) for p in range(3)]
        consumer.commit(offsets=commits, asynchronous=False)
        consumer.close()
        broker.restart()
        consumer = clients.consumer(broker.bootstrap_servers, "survivor")
        committed = consumer.committed([TopicPartition("kept", p) for p in range(3)], timeout=10)
        consumer.close()
    assert [tp.offset for tp in committed] == [10, 20, 30]
