"""Changelogs through a real broker: a task writes its stores' changelogs in Kafka transactions, and
a fresh instance restores the stores from the topic (read_committed) to exactly the same contents."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError

from strom.kafka import clients
from strom.kafka.serdes import Serdes
from strom.streams.state.stores import Stores
from strom.streams.state.timestamped import ValueAndTimestamp
from support.kafka import read_partition

from .store_host import StoreHost

pytestmark = pytest.mark.broker


class KafkaHost(StoreHost):
    """A task whose record collector is a transactional producer, committing as the EOS runtime does:
    flush caches, commit the Kafka transaction, then apply the store writes with the new offsets."""

    def __init__(self, state_dir: Any, bootstrap: str, application_id: str, instance: str) -> None:
        super().__init__(state_dir)
        self.application_id = application_id
        self.bootstrap = bootstrap
        self.delivered: dict[str, int] = {}
        self.producer = clients.producer(bootstrap, **{"transactional.id": f"{application_id}-{instance}"})
        self.producer.init_transactions(30)
        self.producer.begin_transaction()

    def log_change(self, store_name: str, key: bytes, value: bytes | None, timestamp: int,
                   headers: Any) -> None:
        self.producer.produce(self.changelog_topic(store_name), key=key, value=value,
                              partition=self.partition, timestamp=timestamp, on_delivery=self._on_delivery)

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is None:
            self.delivered[message.topic()] = message.offset()
        else:  # only an abort may drop records (purged from the queue)
            assert error.code() == KafkaError._PURGE_QUEUE, error

    def commit(self) -> None:
        self.manager.flush()
        assert self.producer.flush(30) == 0
        self.producer.commit_transaction(30)
        self.manager.commit({store: self.delivered[topic] + 1
                             for store, (topic, _) in self.manager.changelog_partitions().items()
                             if topic in self.delivered})
        self.producer.begin_transaction()

    def abort(self) -> None:
        self.producer.abort_transaction(30)
        self.manager.abort()
        self.producer.begin_transaction()

    def restore_all(self) -> int:
        restored = 0
        offsets = self.manager.changelog_offsets()
        for store, (topic, partition) in self.manager.changelog_partitions().items():
            start = offsets[store]
            restored += self.manager.restore(store, read_changelog(
                self.bootstrap, topic, partition, OFFSET_BEGINNING if start is None else start))
        return restored


def read_changelog(bootstrap: str, topic: str, partition: int, start: int) -> list[tuple]:
    return [(m.key(), m.value(), m.offset(), m.timestamp()[1])
            for m in read_partition(bootstrap, topic, partition, start)]


def builders() -> list[Any]:
    return [
        Stores.timestamped_key_value_store_builder(Stores.persistent_timestamped_key_value_store("totals"),
                                                   Serdes.String(), Serdes.Long()).with_caching_enabled(),
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("names"),
                                       Serdes.Integer(), Serdes.String()),
    ]


def open_stores(host: KafkaHost) -> list[Any]:
    stores = [host.init(builder) for builder in builders()]
    stores[0].set_flush_listener(lambda *change: None, True)
    return stores


def test_stores_restored_from_the_broker_equal_the_originals(broker, tmp_path):
    application_id = f"state-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers,
                          {f"{application_id}-{name}-changelog": 1 for name in ("totals", "names")},
                          {"cleanup.policy": "compact"})
    writer = KafkaHost(tmp_path / "writer", broker.bootstrap_servers, application_id, "writer")
    totals, names = open_stores(writer)
    for i in range(300):
        writer.at(1_000 + i, offset=i)
        key = f"user-{i % 23}"
        old = totals.get(key)
        totals.put(key, ValueAndTimestamp.make((old.value if old else 0) + i, 1_000 + i))
        names.put(i % 50, f"name-{i}")
        if i % 100 == 99:
            writer.commit()
    totals.put("ghost", ValueAndTimestamp.make(-1, 5))  # aborted: must appear nowhere
    names.put(999, "ghost")
    writer.abort()
    totals.delete("user-0")
    names.delete(7)
    writer.commit()
    expected = (list(totals.all()), list(names.all()))
    assert ("ghost", ValueAndTimestamp(-1, 5)) not in expected[0]

    reader = KafkaHost(tmp_path / "reader", broker.bootstrap_servers, application_id, "reader")
    restored_totals, restored_names = open_stores(reader)
    assert reader.restore_all() > 0
    assert (list(restored_totals.all()), list(restored_names.all())) == expected
    assert reader.manager.changelog_offsets() == writer.manager.changelog_offsets()
    reader.manager.close()

    # the writer restarts: RocksDB kept its committed data and offset, the in-memory store restores
    writer.manager.close()
    writer.producer.abort_transaction(30)
    again = KafkaHost(tmp_path / "writer", broker.bootstrap_servers, application_id, "writer")
    totals, names = open_stores(again)
    assert again.manager.changelog_offsets()["names"] is None
    again.restore_all()
    assert (list(totals.all()), list(names.all())) == expected
    again.manager.close()
    again.producer.abort_transaction(30)
