"""Decoding and encoding the connector's key and value columns with strom serdes, Schema Registry ones
included (pickled to the executors as their configuration)."""

from __future__ import annotations

import json
import uuid

import pytest
from pyspark.sql import functions as F

from strom.kafka.schema_registry import GenericAvroSerde
from strom.kafka.serdes import Serdes
from strom.spark.connector.serde_columns import from_serde, to_serde

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                       {"name": "item", "type": "string"}]}
ORDER_DDL = "struct<id:bigint,item:string>"


def test_json_values_decoded_from_a_topic_and_encoded_back(spark, broker, new_topic, produce, consume_all):
    source, target = new_topic(), new_topic()
    produce(broker.bootstrap_servers, source, [(b"k1", json.dumps({"id": 1, "item": "tea"}).encode()),
                                               (b"k2", json.dumps({"id": 2, "item": "jam"}).encode())])
    read = (spark.read.format("strom").option("kafka.bootstrap.servers", broker.bootstrap_servers)
            .option("subscribe", source).load())
    orders = read.select(F.col("key"), from_serde("value", Serdes.Json(), ORDER_DDL).alias("order"))
    assert sorted((r.order.id, r.order.item) for r in orders.collect()) == [(1, "tea"), (2, "jam")]
    shouted = orders.select("key", to_serde(F.struct(F.col("order.id").alias("id"),
                                                     F.upper("order.item").alias("item")),
                                            Serdes.Json(), target).alias("value"))
    (shouted.write.format("strom").mode("append").option("kafka.bootstrap.servers", broker.bootstrap_servers)
     .option("topic", target).save())
    written = consume_all(broker.bootstrap_servers, target, expected=2)
    values = sorted((json.loads(m.value()) for m in written), key=lambda order: order["id"])
    assert values == [{"id": 1, "item": "TEA"}, {"id": 2, "item": "JAM"}]


def test_a_schema_registry_serde_works_on_the_executors(spark):
    serde = GenericAvroSerde({"schema.registry.url": f"mock://{uuid.uuid4().hex}"}, ORDER)
    df = spark.createDataFrame([(1, "tea"), (2, None)], "id bigint, item string")
    encoded = df.select(to_serde(F.struct("id", F.coalesce("item", F.lit("-")).alias("item")), serde,
                                 "orders").alias("value"))
    # one projection: both run in the same executor process, so they see one in-process registry
    both = encoded.select(F.col("value"), from_serde("value", serde, ORDER_DDL).alias("order")).collect()
    assert all(r.value[0] == 0 for r in both)  # Confluent's magic byte
    assert sorted((r.order.id, r.order.item) for r in both) == [(1, "tea"), (2, "-")]
