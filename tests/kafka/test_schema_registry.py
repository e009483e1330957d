"""Schema Registry serdes against confluent-kafka's in-process mock registry: bytes in Confluent's wire
format, read and written both ways with confluent-kafka's own serializers, the serializer settings, and
the serdes in a topology (TopologyTestDriver)."""

from __future__ import annotations

import importlib
import json
import pickle
import sys
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from grpc_tools import protoc

from strom.errors import ConfigError, SerializationError
from strom.kafka.schema_registry import (
    GenericAvroSerde,
    KafkaJsonSchemaSerde,
    KafkaProtobufSerde,
    registry_client,
    serde_for_format,
)
from strom.kafka.serdes import Serdes
from strom.streams import Consumed, Produced, StreamsBuilder, TopologyTestDriver

ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
ORDER_V2 = {**ORDER, "fields": [*ORDER["fields"], {"name": "qty", "type": "int", "default": 1}]}
VALUE = SerializationContext("orders", MessageField.VALUE)


@pytest.fixture
def config() -> dict[str, str]:
    """A fresh in-process registry per test (the client is shared per URL within the process)."""
    return {"schema.registry.url": f"mock://{uuid.uuid4().hex}"}


def _client(config) -> SchemaRegistryClient:
    return registry_client({"url": config["schema.registry.url"]})


def test_avro_in_confluents_wire_format_both_ways(config):
    client = _client(config)
    serde = GenericAvroSerde(config, ORDER)
    data = serde.serialize("orders", {"id": 7, "item": "tea"})
    schema_id = client.get_latest_version("orders-value").schema_id
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == schema_id  # magic byte, schema id
    assert AvroDeserializer(client)(data, VALUE) == {"id": 7, "item": "tea"}
    theirs = AvroSerializer(client, json.dumps(ORDER))({"id": 8, "item": "jam"}, VALUE)
    assert GenericAvroSerde(config).deserialize("orders", theirs) == {"id": 8, "item": "jam"}
    assert serde.serialize("orders", None) is None and serde.deserialize("orders", None) is None


def test_avro_reader_schema_and_use_latest_version(config):
    client = _client(config)
    old = AvroSerializer(client, json.dumps(ORDER))({"id": 1, "item": "tea"}, VALUE)
    assert GenericAvroSerde(config, ORDER_V2).deserialize("orders", old) == {"id": 1, "item": "tea", "qty": 1}
    GenericAvroSerde(config, ORDER_V2).serialize("orders", {"id": 2, "item": "jam", "qty": 3})
    latest = GenericAvroSerde({**config, "use.latest.version": "true", "auto.register.schemas": "false"})
    data = latest.serialize("orders", {"id": 3, "item": "oat", "qty": 2})
    assert int.from_bytes(data[1:5], "big") == client.get_latest_version("orders-value").schema_id
    assert AvroDeserializer(client)(data, VALUE) == {"id": 3, "item": "oat", "qty": 2}


def test_auto_register_off_and_subject_name_strategies(config):
    unregistered = GenericAvroSerde({**config, "auto.register.schemas": False}, ORDER)
    with pytest.raises(SerializationError, match=r"auto\.register\.schemas"):
        unregistered.serialize("orders", {"id": 1, "item": "tea"})
    strategy = "io.confluent.kafka.serializers.subject.RecordNameStrategy"
    record_named = GenericAvroSerde({**config, "value.subject.name.strategy": strategy}, ORDER)
    record_named.serialize("orders", {"id": 1, "item": "tea"})
    GenericAvroSerde({**config, "key.subject.name.strategy": "TopicRecordNameStrategy"}, ORDER,
                     is_key=True).serialize("orders", {"id": 1, "item": "tea"})
    assert sorted(_client(config).get_subjects()) == ["orders-shop.Order", "shop.Order"]
    with pytest.raises(ConfigError, match=r"subject\.name\.strategy"):
        GenericAvroSerde({**config, "value.subject.name.strategy": "NoSuchStrategy"})
    with pytest.raises(ConfigError, match=r"schema\.registry\.url"):
        GenericAvroSerde({"auto.register.schemas": True})
    with pytest.raises(ConfigError, match="Unknown configuration key"):
        GenericAvroSerde({**config, "auto.register.schema": True})


def test_a_record_not_in_confluents_format_is_a_clear_error(config):
    with pytest.raises(SerializationError, match="Confluent's wire format"):
        GenericAvroSerde(config).deserialize("orders", b"plain bytes")
    with pytest.raises(SerializationError, match="against the schema"):
        GenericAvroSerde(config, ORDER).serialize("orders", {"id": "not a long"})


@pytest.fixture(scope="module")
def order_pb2(tmp_path_factory):
    out = tmp_path_factory.mktemp("order_pb")
    (out / "shop_order.proto").write_text(
        'syntax = "proto3";\npackage shop;\nmessage Order { int64 id = 1; string item = 2; }\n')
    assert protoc.main(["protoc", f"-I{out}", f"--python_out={out}", str(out / "shop_order.proto")]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("shop_order_pb2")
    finally:
        sys.path.remove(str(out))


def test_protobuf_both_ways_with_confluents_serializers(config, order_pb2):
    client = _client(config)
    serde = KafkaProtobufSerde(order_pb2.Order, config)
    data = serde.serialize("orders", order_pb2.Order(id=5, item="rice"))
    assert data[0] == 0
    theirs_read = ProtobufDeserializer(order_pb2.Order, {}, client)(data, VALUE)
    assert theirs_read == order_pb2.Order(id=5, item="rice")
    theirs = ProtobufSerializer(order_pb2.Order, client, {})(order_pb2.Order(id=6, item="salt"), VALUE)
    assert serde.deserialize("orders", theirs) == order_pb2.Order(id=6, item="salt")
    with pytest.raises(ConfigError, match="generated protobuf message class"):
        KafkaProtobufSerde(dict, config)


def test_json_schema_validates_and_reads_with_the_writers_schema(config):
    schema = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    serde = KafkaJsonSchemaSerde(config, schema)
    data = serde.serialize("orders", {"id": 3})
    assert data[0] == 0 and json.loads(data[5:]) == {"id": 3}
    assert KafkaJsonSchemaSerde(config).deserialize("orders", data) == {"id": 3}
    with pytest.raises(SerializationError, match="is not of type 'integer'"):
        serde.serialize("orders", {"id": "x"})


def test_serdes_pickle_as_their_configuration_and_formats_by_name(config):
    serde = GenericAvroSerde(config, ORDER)
    data = serde.serialize("orders", {"id": 1, "item": "tea"})
    copy = pickle.loads(pickle.dumps(serde))  # as Spark ships it; same process, so the same registry
    assert copy.deserialize("orders", data) == {"id": 1, "item": "tea"}
    assert serde_for_format("avro", config).deserialize("orders", data) == {"id": 1, "item": "tea"}
    assert isinstance(serde_for_format("json-schema", config), KafkaJsonSchemaSerde)
    with pytest.raises(ConfigError, match="message class"):
        serde_for_format("protobuf", config)
    with pytest.raises(ConfigError, match="avro, protobuf, json_schema"):
        serde_for_format("thrift", config)


def test_avro_serdes_in_a_topology(config):
    client = _client(config)
    builder = StreamsBuilder()
    (builder.stream("orders", Consumed.with_(Serdes.String(), GenericAvroSerde(config)))
     .map_values(lambda order: {**order, "item": order["item"].upper()})
     .to("shouted", Produced.with_(Serdes.String(), GenericAvroSerde(config, ORDER))))
    with TopologyTestDriver(builder.build(), {"application.id": "sr"}) as driver:
        orders = driver.create_input_topic("orders", Serdes.String(), GenericAvroSerde(config, ORDER))
        orders.pipe_input("k", {"id": 1, "item": "tea"})
        raw = driver.create_output_topic("shouted", Serdes.String(), Serdes.ByteArray()).read_value()
    out = SerializationContext("shouted", MessageField.VALUE)
    assert AvroDeserializer(client)(raw, out) == {"id": 1, "item": "TEA"}
    assert client.get_subjects() == ["orders-value", "shouted-value"]
