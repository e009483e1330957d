"""kafka-python, aiokafka and kcat against the strom broker: every codec, keys, headers, metadata."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from broker_helpers import unique
from kafka import KafkaConsumer, KafkaProducer

from strom.kafka import clients

pytestmark = pytest.mark.broker
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def _expected(client: str) -> dict[bytes, tuple[bytes, bytes]]:
    """value -> (key, header) of the records each codec round writes."""
    return {f"{client}-{codec}-{i}".encode(): (f"k{i % 7}".encode(), str(codec).encode())
            for codec in CODECS for i in range(40)}


def test_kafka_python_round_trip(broker):
    topic = unique("kafka-python")
    clients.create_topics(broker.bootstrap_servers, {topic: 3})
    for codec in CODECS:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, compression_type=codec,
                                 acks="all")
        for i in range(40):
            producer.send(topic, key=f"k{i % 7}".encode(), value=f"kp-{codec}-{i}".encode(),
                          headers=[("codec", str(codec).encode())])
        producer.flush()
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=unique("g"),
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    got = {r.value: (r.key, dict(r.headers)["codec"]) for r in consumer}
    consumer.commit()
    consumer.close()
    assert got == _expected("kp")


def test_aiokafka_round_trip(broker):
    topic = unique("aiokafka")
    clients.create_topics(broker.bootstrap_servers, {topic: 3})

    async def run() -> dict[bytes, tuple[bytes, bytes]]:
        for codec in CODECS:
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, compression_type=codec,
                                        acks="all", enable_idempotence=True)
            await producer.start()
            batch = [producer.send(topic, key=f"k{i % 7}".encode(), value=f"aio-{codec}-{i}".encode(),
                                   headers=[("codec", str(codec).encode())]) for i in range(40)]
            await asyncio.gather(*[await f for f in batch])
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers, group_id=unique("g"),
                                    auto_offset_reset="earliest")
        await consumer.start()
        got = {}
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got.update({r.value: (r.key, dict(r.headers)["codec"]) for r in records})
        await consumer.commit()
        await consumer.stop()
        return got

    assert asyncio.run(run()) == _expected("aio")


def test_kcat_lists_metadata_and_consumes(broker):
    assert shutil.which("kcat"), "kcat is missing: `make` installs it (apt-get install -y kcat)"
    topic = unique("kcat")
    clients.create_topics(broker.bootstrap_servers, {topic: 2})
    producer = clients.producer(broker.bootstrap_servers, **{"compression.type": "zstd"})
    for i in range(20):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    producer.flush(10)

    listing = subprocess.run(["kcat", "-b", broker.bootstrap_servers, "-L", "-t", topic],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    assert f'topic "{topic}" with 2 partitions' in listing
    command = ["kcat", "-b", broker.bootstrap_servers, "-C", "-t", topic, "-e", "-q", "-f", "%k=%s\\n"]
    consumed = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True).stdout
    assert sorted(consumed.split()) == sorted(f"k{i}=v{i}" for i in range(20))


def test_kcat_balanced_consumer_joins_a_group(broker):
    """kcat -G: kcat's own librdkafka goes through the member id handshake and the group protocol."""
    topic, group = unique("kcat-group"), unique("g")
    clients.create_topics(broker.bootstrap_servers, {topic: 2})
    producer = clients.producer(broker.bootstrap_servers)
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    producer.flush(10)
    command = ["kcat", "-b", broker.bootstrap_servers, "-G", group, "-e", "-q", "-o", "beginning", topic]
    consumed = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    assert sorted(consumed.split()) == sorted(f"v{i}" for i in range(10))
