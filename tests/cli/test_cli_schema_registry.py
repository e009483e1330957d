"""`strom consume/produce` with Schema Registry formats against the broker and confluent-kafka's in-process
mock registry: JSON lines written as Avro / JSON Schema in Confluent's wire format and read back, records
of confluent-kafka's own AvroSerializer and ProtobufSerializer read, strom's read by its AvroDeserializer,
and the errors."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, timestamp_pb2
from google.protobuf.descriptor_pb2 import FieldDescriptorProto as FieldType
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass

from cli.strom_cli import unique
from strom.kafka.schema_registry import registry_client
from support.kafka import produce, read_topic

pytestmark = pytest.mark.broker

ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"},
                    {"name": "note", "type": ["null", "bytes"], "default": None}]}
ORDER_SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
                "required": ["id", "item"]}


@pytest.fixture
def registry() -> str:
    """-X for a fresh in-process registry (shared per URL within the process, as the CLI runs here)."""
    return f"schema.registry.url=mock://{uuid.uuid4().hex}"


def _topic(strom) -> str:
    topic = unique("sr")
    strom.ok("topics", "create", topic)
    return topic


def _schema_file(tmp_path, schema) -> str:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    return str(path)


def _consume(strom, registry, topic, fmt="avro", *more) -> list:
    out = strom.ok("consume", topic, "-X", registry, "-o", "beginning", "-e", "-f", r"%k\t%s\n",
                   "--value-deserializer", fmt, *more)
    return [(key, json.loads(value)) for key, value in (line.split("\t") for line in out.lines)]


def test_avro_lines_round_trip_and_confluents_deserializer_reads_them(strom, broker, registry, tmp_path):
    topic = _topic(strom)
    lines = (b'a:{"id": 1, "item": "tea", "note": null}\n'
             b'b:{"id": 2, "item": "jam", "note": null}\n')
    strom.ok("produce", topic, "-X", registry, "-K", ":", "--value-serializer", "avro",
             "--value-schema", _schema_file(tmp_path, ORDER), stdin=lines)

    assert _consume(strom, registry, topic) == [
        ("a", {"id": 1, "item": "tea", "note": None}), ("b", {"id": 2, "item": "jam", "note": None})]
    client = registry_client({"url": registry.split("=", 1)[1]})
    theirs = AvroDeserializer(client)
    read = [theirs(m.value(), SerializationContext(topic, MessageField.VALUE))
            for m in read_topic(broker.bootstrap_servers, topic)]
    assert read == [{"id": 1, "item": "tea", "note": None}, {"id": 2, "item": "jam", "note": None}]


def test_records_of_confluents_avro_serializer_are_shown_and_keys_may_be_avro_too(strom, broker, registry):
    topic = _topic(strom)
    client = registry_client({"url": registry.split("=", 1)[1]})
    key_schema = json.dumps({"type": "record", "name": "Key", "fields": [{"name": "k", "type": "string"}]})
    keys = AvroSerializer(client, key_schema)
    values = AvroSerializer(client, json.dumps(ORDER))
    produce(broker.bootstrap_servers, topic, [
        (keys({"k": "x"}, SerializationContext(topic, MessageField.KEY)),
         values({"id": 9, "item": "oat", "note": b"\xff!"},
                SerializationContext(topic, MessageField.VALUE)))])

    out = strom.ok("consume", topic, "-X", registry, "-o", "beginning", "-e", "--print-key",
                   "--key-deserializer", "avro", "--value-deserializer", "avro").lines
    assert out == ['{"k": "x"}\t{"id": 9, "item": "oat", "note": "\u00ff!"}']  # bytes: one char per byte


def test_json_schema_round_trip_and_the_latest_registered_schema(strom, registry, tmp_path):
    topic = _topic(strom)
    strom.ok("produce", topic, "-X", registry, "--value-serializer", "json_schema",
             "--value-schema", _schema_file(tmp_path, ORDER_SCHEMA), stdin=b'{"id": 1, "item": "tea"}\n')
    strom.ok("produce", topic, "-X", registry, "-X", "use.latest.version=true", "--value-serializer",
             "json_schema", stdin=b'{"id": 2, "item": "jam"}\n')  # no schema file: the subject's latest
    assert [v for _, v in _consume(strom, registry, topic, "json_schema")] == [
        {"id": 1, "item": "tea"}, {"id": 2, "item": "jam"}]
    error = strom.fails("produce", topic, "-X", registry, "-X", "use.latest.version=true",
                        "--value-serializer", "json_schema", stdin=b'{"id": "three"}\n')
    assert "line 1" in error and "json_schema" in error


def test_registry_errors_say_what_to_do(strom, registry, tmp_path):
    topic = _topic(strom)
    schema = _schema_file(tmp_path, ORDER)
    assert "needs the registry: -X schema.registry.url=URL" in strom.fails(
        "consume", topic, "-e", "--value-deserializer", "avro")
    unreachable = strom.fails("consume", topic, "-e", "-X", "schema.registry.url=http://127.0.0.1:9",
                              "-X", "schema.registry.max.retries=0", "--value-deserializer", "avro")
    assert "Schema Registry at http://127.0.0.1:9 did not answer" in unreachable
    assert "needs the writer's schema: --value-schema FILE" in strom.run(
        "produce", topic, "-X", registry, "--value-serializer", "avro").err
    assert "'xml' is not one of" in strom.fails("consume", topic, "--value-deserializer", "xml")
    bad_line = strom.fails("produce", topic, "-X", registry, "--value-serializer", "avro",
                           "--value-schema", schema, stdin=b'{"id": 1, "item": "tea"}\n{"id": "x"}\n')
    assert "line 2" in bad_line and "1 record(s) before it were written" in bad_line

    strom.ok("produce", topic, stdin=b"plain text\n")  # offset 1: not in Confluent's wire format
    result = strom.run("consume", topic, "-X", registry, "-o", "beginning", "-e",
                       "--value-deserializer", "avro")
    assert result.code == 2 and json.loads(result.out) == {"id": 1, "item": "tea", "note": None}
    assert f"The value at {topic}-0@1" in result.err and "is not avro" in result.err


def _shop_messages(name: str = "Order"):
    """Generated-like classes of ``package shop; import timestamp; message Line {...} message Order {...}``
    (Order is the second message: its records carry message index 1)."""
    pool = DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(
        name="shop.proto", package="shop", syntax="proto3", dependency=["google/protobuf/timestamp.proto"])
    line = file.message_type.add(name="Line")
    line.field.add(name="sku", number=1, type=FieldType.TYPE_STRING, label=FieldType.LABEL_OPTIONAL)
    order = file.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=FieldType.TYPE_INT32, label=FieldType.LABEL_OPTIONAL)
    order.field.add(name="placed", number=2, type=FieldType.TYPE_MESSAGE, label=FieldType.LABEL_OPTIONAL,
                    type_name=".google.protobuf.Timestamp")
    order.field.add(name="lines", number=3, type=FieldType.TYPE_MESSAGE, label=FieldType.LABEL_REPEATED,
                    type_name=".shop.Line")
    pool.Add(file)
    return GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))


def test_protobuf_of_confluents_serializer_is_shown_as_json_without_generated_classes(strom, broker,
                                                                                      registry):
    topic = _topic(strom)
    order_class = _shop_messages()
    order = order_class(id=7)
    order.placed.FromSeconds(86_400)
    order.lines.add(sku="tea")
    client = registry_client({"url": registry.split("=", 1)[1]})
    data = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})(
        order, SerializationContext(topic, MessageField.VALUE))
    produce(broker.bootstrap_servers, topic, [("k", data), ("bad", b"\x00\x00\x00\x00\x63\x00")])

    result = strom.run("consume", topic, "-X", registry, "-o", "beginning", "-e",
                       "--value-deserializer", "protobuf")
    assert json.loads(result.out) == {"id": 7, "placed": "1970-01-02T00:00:00Z", "lines": [{"sku": "tea"}]}
    assert result.code == 2 and f"The value at {topic}-0@1" in result.err and "is not protobuf" in result.err
    assert "use.latest.version=true" in strom.run(
        "produce", topic, "-X", registry, "--value-serializer", "protobuf").err


def test_protobuf_lines_are_written_with_the_subjects_latest_schema_and_read_by_confluents_deserializer(
        strom, broker, registry):
    topic = _topic(strom)
    line_class = _shop_messages("Line")  # the schema's first message, which the CLI writes
    client = registry_client({"url": registry.split("=", 1)[1]})
    latest = ["-X", registry, "-X", "use.latest.version=true", "--value-serializer", "protobuf"]
    unregistered = strom.run("produce", topic, *latest, stdin=b'{"sku": "tea"}\n')
    assert unregistered.code != 0 and f"Subject '{topic}-value' has no protobuf schema" in unregistered.err
    ProtobufSerializer(line_class, client, {"use.deprecated.format": False})(  # registers the schema
        line_class(sku="jam"), SerializationContext(topic, MessageField.VALUE))

    strom.ok("produce", topic, *latest, stdin=b'{"sku": "tea"}\n{"sku": "cake"}\n')
    values = [message.value() for message in read_topic(broker.bootstrap_servers, topic)]
    read = ProtobufDeserializer(line_class, {"use.deprecated.format": False})
    assert [read(v, SerializationContext(topic, MessageField.VALUE)).sku for v in values] == ["tea", "cake"]
    assert [v for _, v in _consume(strom, registry, topic, "protobuf")] == [{"sku": "tea"}, {"sku": "cake"}]
    bad = strom.run("produce", topic, *latest, stdin=b'{"sku": "ok"}\n{"size": 3}\n')
    assert bad.code != 0 and "line 2" in bad.err and "is not protobuf" in bad.err
