"""The word-count topology of the runtime tests, and a read_committed reader of its output.

Also a script: ``python wordcount.py BOOTSTRAP LINES COUNTS STATE_DIR APP_ID`` runs the topology
exactly-once on Spark until every input record is committed, for the SIGKILL test.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from strom.kafka import clients
from strom.streams import Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder, Topology

S, L = Serdes.String(), Serdes.Long()


def word_count(lines: str, counts: str) -> Topology:
    """Lines → words, re-keyed by word (repartition topic) → count (RocksDB store, changelog)."""
    builder = StreamsBuilder()
    (builder.stream(lines, Consumed.with_(S, S))
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, Grouped.as_("words").with_key_serde(S).with_value_serde(S))
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to(counts, Produced.with_(S, L)))
    return builder.build()


def read_updates(bootstrap: str, topic: str, timeout: float = 60.0,
                 value_serde: Any = L) -> dict[str, list[Any]]:
    """Every update of ``topic`` read read_committed, in order per key (values Long unless told)."""
    consumer = clients.consumer(bootstrap, **{"enable.partition.eof": True})
    partitions = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    updates: dict[str, list[int]] = defaultdict(list)
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(at_end) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            if message.error() is None:
                updates[S.deserializer().deserialize(topic, message.key())].append(
                    value_serde.deserializer().deserialize(topic, message.value()))
            elif message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
    consumer.close()
    assert len(at_end) == partitions, f"{topic} not read to its end in {timeout}s"
    return dict(updates)


def main(bootstrap: str, lines: str, counts: str, state_dir: str, app_id: str, mode: str) -> None:
    import strom.spark
    from strom.spark.runtime import SparkStreams

    spark = strom.spark.session(app_name="strom-runtime-kill", log_level="ERROR")
    app = SparkStreams(word_count(lines, counts), {
        "application.id": app_id, "bootstrap.servers": bootstrap, "state.dir": state_dir,
        "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 100,
        "max.offsets.per.trigger": 120, "execution.mode": mode, "realtime.batch.duration.ms": 2000}, spark)
    app.start()
    caught_up = app.wait_until_caught_up(240)
    app.stop()
    spark.stop()
    sys.exit(0 if caught_up else 3)


if __name__ == "__main__":
    main(*sys.argv[1:7])
