"""examples/word_count_app.py as the tests run it with `strom run`: its environment (application id,
state directory, topics) and the last count per word its output holds."""

from __future__ import annotations

import os
import time
from pathlib import Path

from confluent_kafka import KafkaError, TopicPartition

from strom.kafka import clients
from strom.streams import Serdes

APP = Path(__file__).resolve().parents[2] / "examples" / "word_count_app.py"
LONG = Serdes.Long().deserializer()


def app_env(state_dir: Path, app_id: str, **variables: str) -> dict[str, str]:
    """This process's environment with the app's settings: ``lines="topic"`` is ``WORD_COUNT_LINES``."""
    return {**os.environ, "WORD_COUNT_APP_ID": app_id, "WORD_COUNT_STATE_DIR": str(state_dir),
            **{f"WORD_COUNT_{k.upper()}": v for k, v in variables.items()}}


def read_counts(bootstrap: str, topic: str, timeout: float = 60.0) -> dict[str, int]:
    """The last count per word, read read_committed to the end of every partition."""
    consumer = clients.consumer(bootstrap, **{"enable.partition.eof": True})
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    latest, at_end = {}, set()
    deadline = time.monotonic() + timeout
    while len(at_end) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.5):
            if message.error() is None:
                latest[message.key().decode()] = LONG.deserialize(topic, message.value())
            elif message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
    consumer.close()
    return latest
