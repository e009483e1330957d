"""Decode and encode the binary key and value columns of the "strom" source and sink with strom serdes.

``from_serde(col("value"), GenericAvroSerde({...}), "struct<id:bigint,item:string>")`` turns Kafka bytes
(here Confluent's Avro wire format) into a Spark column of ``data_type``; ``to_serde(col, serde, topic)``
turns a column back into bytes for ``df.write.format("strom")``. Any strom serde works: the Schema
Registry ones (``strom.kafka.schema_registry``), ``Serdes.Json()``, ``Serdes.Avro(schema)``... The serde
travels to the executors pickled (a Schema Registry serde as its configuration, its client made there).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, Row
from pyspark.sql.functions import col, udf
from pyspark.sql.types import BinaryType, DataType

from strom.kafka.serdes import Serde

__all__ = ["from_serde", "to_serde"]


def _column(column: Column | str) -> Column:
    return col(column) if isinstance(column, str) else column


def from_serde(column: Column | str, serde: Serde[Any], data_type: DataType | str,
               topic: str | None = None) -> Column:
    """The bytes of ``column`` deserialized by ``serde`` into ``data_type`` (a DataType or a DDL string,
    e.g. ``"struct<id:bigint,item:string>"``); null stays null."""
    deserializer = serde.deserializer()

    def decode(data):  # no type hints: Spark would take them for a pandas UDF's
        return None if data is None else deserializer.deserialize(topic, bytes(data))

    return udf(decode, data_type)(_column(column))


def to_serde(column: Column | str, serde: Serde[Any], topic: str) -> Column:
    """``column`` serialized by ``serde`` for ``topic`` (a Schema Registry serde names its subject after it);
    structs reach the serde as dicts."""
    serializer = serde.serializer()

    def encode(value):  # no type hints, as decode
        if isinstance(value, Row):
            value = value.asDict(recursive=True)
        return serializer.serialize(topic, value)

    return udf(encode, BinaryType())(_column(column))
