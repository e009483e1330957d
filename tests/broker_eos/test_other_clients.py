"""Transactions from kafka-python and aiokafka: other protocol implementations must work alike."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from strom.kafka import clients

pytestmark = pytest.mark.broker
EXPECTED = {"read_committed": [b"committed", b"last"],
            "read_uncommitted": [b"committed", b"aborted", b"last"]}


def _topic(broker) -> str:
    name = f"other-txn-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers, {name: 1})
    return name


def test_kafka_python_transactions(broker) -> None:
    topic = _topic(broker)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id=f"kp-{topic}")
    producer.init_transactions()
    for value, commit in ((b"committed", True), (b"aborted", False), (b"last", True)):
        producer.begin_transaction()
        producer.send(topic, value, partition=0)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    for isolation, expected in EXPECTED.items():
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, isolation_level=isolation)
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values: list[bytes] = []
        deadline = time.monotonic() + 15
        while b"last" not in values and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                values += [r.value for r in records]
        consumer.close()
        assert values == expected, isolation


def test_aiokafka_transactions(broker) -> None:
    topic = _topic(broker)

    async def scenario() -> dict[str, list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                                    transactional_id=f"aio-{topic}")
        await producer.start()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed", partition=0)
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted", partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"last", partition=0)
        await producer.stop()
        seen = {}
        for isolation in EXPECTED:
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap_servers,
                                        isolation_level=isolation, auto_offset_reset="earliest")
            await consumer.start()
            values: list[bytes] = []
            while b"last" not in values:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    values += [r.value for r in records]
            await consumer.stop()
            seen[isolation] = values
        return seen

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == EXPECTED
