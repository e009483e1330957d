"""A commit decided just before a broker crash is completed when the broker starts again."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from strom.broker import EmbeddedBroker
from strom.broker.config import BrokerConfig
from strom.broker.log.manager import LogManager
from strom.broker.transactions.metadata import TxnState, decode_key, decode_value
from strom.broker.transactions.service import StateTopic
from strom.kafka import clients

pytestmark = pytest.mark.broker


def _record_decision_as_the_crashed_coordinator_had(data_dir: Path, txn_id: str) -> None:
    """Appends the PrepareCommit record the coordinator writes before any marker to the stopped log."""
    logs = LogManager(data_dir, BrokerConfig())
    state = StateTopic(logs, 1)
    records = [decode_value(txn_id, v) for k, v in state.read() if v is not None and decode_key(k) == txn_id]
    latest = records[-1]
    assert latest.state == TxnState.ONGOING
    prepared = latest.transition(TxnState.PREPARE_COMMIT, latest.last_update_ms + 1)
    asyncio.run(state.append(prepared.key_bytes(), prepared.value_bytes()))
    logs.close()


def test_prepare_commit_found_at_start_is_completed(tmp_path: Path) -> None:
    topic, txn_id = f"recovery-{uuid.uuid4().hex[:6]}", f"app-{uuid.uuid4().hex[:6]}"
    with EmbeddedBroker(tmp_path / "broker") as broker:
        clients.create_topics(broker.bootstrap_servers, {topic: 1})
        producer = clients.producer(broker.bootstrap_servers, **{"transactional.id": txn_id})
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce(topic, b"decided", partition=0)
        producer.flush(10)
        broker.kill()  # crash after the decision, before any marker was written
        _record_decision_as_the_crashed_coordinator_had(broker.data_dir, txn_id)
        broker.start()

        consumer = clients.consumer(broker.bootstrap_servers, "recovery-reader")
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        for _ in range(50):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
                break
        consumer.close()
        assert values == [b"decided"]  # visible to read_committed: the commit marker was written
