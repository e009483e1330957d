"""Update mode: Spark 4.3 refuses it for Python sinks, so an aggregation's updates go through
foreachBatch, where txnAppId/txnVersion make the batch write exactly-once across replays."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def _counts(spark, broker, topic: str):
    events = (spark.readStream.format("strom").option("kafka.bootstrap.servers", broker.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
    return events.groupBy("key").count().selectExpr("key", "CAST(count AS STRING) AS value")


def _write_batch(broker, topic: str, **extra: str):
    def write(batch, batch_id: int) -> None:
        (batch.write.format("strom").mode("append")
         .option("kafka.bootstrap.servers", broker.bootstrap_servers).option("topic", topic)
         .option("delivery.guarantee", "exactly_once").options(**extra)
         .option("txnAppId", "key-counts").option("txnVersion", batch_id).save())

    return write


def _run_available(counts, writer, checkpoint: str) -> None:
    query = (counts.writeStream.outputMode("update").foreachBatch(writer)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert query.exception() is None


def test_update_mode_on_the_strom_sink_is_refused_by_spark(spark, broker, new_topic, produce, tmp_path):
    source, out = new_topic(), new_topic()
    produce(broker.bootstrap_servers, source, [(b"a", b"1")])
    query = (_counts(spark, broker, source).writeStream.format("strom").outputMode("update")
             .option("kafka.bootstrap.servers", broker.bootstrap_servers).option("topic", out)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException, match="does not support Update mode"):
        query.awaitTermination(240)


def test_updates_through_foreach_batch_are_written_once_when_a_batch_is_replayed(
        spark, broker, new_topic, produce, consume_all, tmp_path):
    source, out = new_topic(), new_topic()
    checkpoint = tmp_path / "ckpt"
    writer = _write_batch(broker, out)
    produce(broker.bootstrap_servers, source, [(b"a", b"1"), (b"b", b"1"), (b"a", b"1")])
    _run_available(_counts(spark, broker, source), writer, str(checkpoint))
    produce(broker.bootstrap_servers, source, [(b"a", b"1")])
    _run_available(_counts(spark, broker, source), writer, str(checkpoint))

    # As if the query died after the sink wrote batch 1 but before Spark recorded it: the
    # restarted query runs batch 1 again, from the same offsets and state.
    for name in ("1", ".1.crc"):
        (checkpoint / "commits" / name).unlink()
    _run_available(_counts(spark, broker, source), writer, str(checkpoint))

    written = consume_all(broker.bootstrap_servers, out, expected=3)
    assert sorted((m.key(), m.value()) for m in written) == [(b"a", b"2"), (b"a", b"3"), (b"b", b"1")]
