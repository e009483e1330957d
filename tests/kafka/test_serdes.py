"""Serdes write Kafka's wire formats and fail with SerializationError on bad data."""

from __future__ import annotations

import struct
import uuid

import pytest

from strom.errors import ConfigError, SerializationError
from strom.kafka.serdes import Serdes

ROUND_TRIPS = [
    (Serdes.String(), "héllo"),
    (Serdes.ByteArray(), b"\x00\xff"),
    (Serdes.Short(), -2),
    (Serdes.Integer(), 2**31 - 1),
    (Serdes.Long(), -(2**63)),
    (Serdes.Float(), 1.5),
    (Serdes.Double(), -0.25),
    (Serdes.Boolean(), True),
    (Serdes.UUID(), uuid.UUID(int=7)),
    (Serdes.Json(), {"b": [1, 2.5, None], "a": "x"}),
]


@pytest.mark.parametrize(("serde", "value"), ROUND_TRIPS, ids=lambda x: repr(x)[:20])
def test_round_trip_and_null(serde, value):
    data = serde.serializer().serialize("t", value)
    assert isinstance(data, bytes)
    assert serde.deserializer().deserialize("t", data) == value
    assert serde.serialize("t", None) is None
    assert serde.deserialize("t", None) is None


def test_numbers_are_big_endian_like_kafka():
    assert Serdes.Integer().serialize("t", 1) == b"\x00\x00\x00\x01"
    assert Serdes.Long().serialize("t", 258) == b"\x00" * 6 + b"\x01\x02"
    assert Serdes.Double().serialize("t", 1.0) == struct.pack(">d", 1.0)
    assert Serdes.Short().serialize("t", -1) == b"\xff\xff"


def test_json_is_compact_and_key_sorted():
    assert Serdes.Json().serialize("t", {"b": 1, "a": 2}) == b'{"a":2,"b":1}'


@pytest.mark.parametrize(("serde", "data"), [
    (Serdes.Integer(), b"\x00\x01"),
    (Serdes.Long(), b"\x00" * 4),
    (Serdes.String(), b"\xff\xfe"),
    (Serdes.Json(), b"{not json"),
    (Serdes.Boolean(), b"\x07"),
])
def test_bad_bytes_raise_serialization_error_naming_topic(serde, data):
    with pytest.raises(SerializationError, match="orders"):
        serde.deserialize("orders", data)


@pytest.mark.parametrize(("serde", "value"), [
    (Serdes.Integer(), "12"), (Serdes.Integer(), 2**40), (Serdes.String(), 5),
    (Serdes.ByteArray(), "text"), (Serdes.Json(), object()), (Serdes.Long(), True),
])
def test_wrong_type_raises_serialization_error(serde, value):
    with pytest.raises(SerializationError, match="serde"):
        serde.serialize("t", value)


AVRO_SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}


def test_avro_round_trip_and_schema_evolution():
    writer = Serdes.Avro(AVRO_SCHEMA)
    data = writer.serialize("t", {"id": 5, "item": "tea"})
    assert writer.deserialize("t", data) == {"id": 5, "item": "tea"}
    newer = {**AVRO_SCHEMA, "fields": [*AVRO_SCHEMA["fields"],
                                       {"name": "qty", "type": "int", "default": 1}]}
    reader = Serdes.Avro(AVRO_SCHEMA, reader_schema=newer)
    assert reader.deserialize("t", data) == {"id": 5, "item": "tea", "qty": 1}


def test_avro_errors():
    with pytest.raises(SerializationError):
        Serdes.Avro(AVRO_SCHEMA).serialize("t", {"id": "x"})
    with pytest.raises(SerializationError):
        Serdes.Avro(AVRO_SCHEMA).deserialize("t", b"\x02\x06tea\x00\x00")
    with pytest.raises(ConfigError, match="Avro schema"):
        Serdes.Avro({"type": "record"})


def test_from_config_accepts_kafka_names_short_names_and_instances():
    assert isinstance(Serdes.from_config("default.key.serde",
                                         "org.apache.kafka.common.serialization.Serdes$StringSerde"),
                      type(Serdes.String()))
    assert isinstance(Serdes.from_config("default.key.serde", "Long"), type(Serdes.Long()))
    serde = Serdes.Json()
    assert Serdes.from_config("default.value.serde", serde) is serde
    assert isinstance(Serdes.from_config("default.value.serde", type(serde)), type(serde))
    with pytest.raises(ConfigError, match=r"default\.value\.serde"):
        Serdes.from_config("default.value.serde", "Strnig")


def test_serde_from_functions():
    serde = Serdes.serde_from(lambda v: v.to_bytes(2, "big"), lambda b: int.from_bytes(b, "big"))
    assert serde.deserialize("t", serde.serialize("t", 513)) == 513
