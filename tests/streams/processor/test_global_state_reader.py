"""A GlobalKTable's store is filled from every partition of its topic on a real broker, and catches up;
a record that will not deserialize is skipped or stops the catch-up at it, as the handler says."""

import struct
import uuid

import pytest

from strom.errors import SerializationError
from strom.kafka import clients
from strom.kafka.serdes import Serdes
from strom.streams import Consumed, Materialized, StreamsBuilder, StreamsConfig
from strom.streams.processor.internals.global_state import GlobalStateStores
from strom.streams.processor.internals.global_state_reader import catch_up, shared_global_stores
from support.kafka import Record, produce

pytestmark = pytest.mark.broker


def _produce(bootstrap, topic, records):
    produce(bootstrap, topic, [Record(key, value, partition) for partition, key, value in records])


def test_global_store_reads_every_partition_and_catches_up(broker, tmp_path):
    topic = f"products-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers, {topic: 3})
    rows = [(p, f"p{p}-{i}", f"v{p}-{i}") for p in range(3) for i in range(2)]
    _produce(broker.bootstrap_servers, topic, rows)
    builder = StreamsBuilder()
    builder.global_table(topic, materialized=Materialized.as_("products"))
    config = StreamsConfig({"application.id": "global-reader", "state.dir": str(tmp_path),
                            "default.key.serde": "String", "default.value.serde": "String"})
    state = GlobalStateStores(builder.build().internal.global_stores, config, tmp_path / "global")
    consumer = clients.consumer(broker.bootstrap_servers, **{"enable.partition.eof": True})
    try:
        assert catch_up(state, consumer) == 6
        store = state.stores["products"]
        assert {k: v.value for k, v in store.all()} == {key: value for _, key, value in rows}
        assert catch_up(state, consumer) == 0
        _produce(broker.bootstrap_servers, topic, [(1, "p1-0", None), (2, "p2-9", "new")])
        assert catch_up(state, consumer) == 2
        assert store.get("p1-0") is None and store.get("p2-9").value == "new"
        assert state.offsets[(topic, 2)] == 3
    finally:
        consumer.close()
        state.close()


def test_shared_global_stores_are_built_once_per_process_and_kept_current(broker, tmp_path):
    topic = f"rates-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers, {topic: 2})
    _produce(broker.bootstrap_servers, topic, [(0, "eur", "1.0"), (1, "usd", "1.1")])
    builder = StreamsBuilder()
    builder.global_table(topic, materialized=Materialized.as_("rates"))
    internal = builder.build().internal
    config = StreamsConfig({"application.id": f"shared-{topic}", "state.dir": str(tmp_path),
                            "default.key.serde": "String", "default.value.serde": "String"})
    consumer = clients.consumer(broker.bootstrap_servers, **{"enable.partition.eof": True})
    try:
        first = shared_global_stores(internal, config, tmp_path / "global", consumer)
        assert {k: v.value for k, v in first["rates"].all()} == {"eur": "1.0", "usd": "1.1"}
        _produce(broker.bootstrap_servers, topic, [(1, "usd", "1.2")])
        again = shared_global_stores(internal, config, tmp_path / "global", consumer)
        assert again["rates"] is first["rates"] and again["rates"].get("usd").value == "1.2"
        assert shared_global_stores(StreamsBuilder().build().internal, config, tmp_path, consumer) == {}
    finally:
        consumer.close()


@pytest.mark.parametrize("handler", ["LogAndContinueExceptionHandler", "LogAndFailExceptionHandler"])
def test_a_record_that_will_not_deserialize_is_skipped_or_stops_the_catch_up_at_it(broker, tmp_path, handler):
    topic = f"limits-{uuid.uuid4().hex[:8]}"
    clients.create_topics(broker.bootstrap_servers, {topic: 1})
    long = struct.Struct(">q").pack
    _produce(broker.bootstrap_servers, topic, [(0, "a", long(1)), (0, "b", b"bad"), (0, "c", long(3))])
    builder = StreamsBuilder()
    builder.global_table(topic, Consumed.with_(Serdes.String(), Serdes.Long()), Materialized.as_("limits"))
    config = StreamsConfig({"application.id": "global-handler", "state.dir": str(tmp_path),
                            "default.deserialization.exception.handler": handler})
    state = GlobalStateStores(builder.build().internal.global_stores, config, tmp_path / "global")
    consumer = clients.consumer(broker.bootstrap_servers, **{"enable.partition.eof": True})
    try:
        store = state.stores["limits"]
        if handler == "LogAndContinueExceptionHandler":
            assert catch_up(state, consumer) == 2
            assert {k: v.value for k, v in store.all()} == {"a": 1, "c": 3}
            assert state.offsets == {(topic, 0): 3}
            return
        for _ in range(2):  # read again from the bad record: it fails again, nothing else changes
            with pytest.raises(SerializationError, match=f"{topic}-0@1"):
                catch_up(state, consumer)
            assert {k: v.value for k, v in store.all()} == {"a": 1}
            assert state.offsets == {(topic, 0): 1}
    finally:
        consumer.close()
        state.close()
