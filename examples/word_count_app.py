"""A strom application for `strom run` and `spark-submit` (docs/deploy.md).

    strom run examples/word_count_app.py                      # embedded broker, local Spark
    strom run examples/word_count_app.py --bootstrap-servers kafka:9092 --master spark://host:7077
    spark-submit --master spark://host:7077 examples/word_count_app.py kafka:9092

``build()`` returns the topology and its configs; the file's ``__main__`` runs it with SparkStreams
itself, as an application submitted with spark-submit does. Topics are given by the environment
(``WORD_COUNT_LINES``, ``WORD_COUNT_COUNTS``) so one file serves several deployments.
"""

from __future__ import annotations

import os
import sys

from strom.streams import Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder, Topology

S, L = Serdes.String(), Serdes.Long()


def build() -> tuple[Topology, dict[str, object]]:
    builder = StreamsBuilder()
    (builder.stream(os.environ.get("WORD_COUNT_LINES", "lines"), Consumed.with_(S, S))
        .flat_map_values(str.split)
        .group_by(lambda key, word: word, Grouped.as_("words").with_key_serde(S).with_value_serde(S))
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to(os.environ.get("WORD_COUNT_COUNTS", "word-counts"), Produced.with_(S, L)))
    props = {
        "application.id": os.environ.get("WORD_COUNT_APP_ID", "word-count"),
        "processing.guarantee": "exactly_once_v2",
        "commit.interval.ms": 500,
    }
    if "WORD_COUNT_STATE_DIR" in os.environ:
        props["state.dir"] = os.environ["WORD_COUNT_STATE_DIR"]
    return builder.build(), props


def main(bootstrap_servers: str) -> None:
    """Runs until every input record is committed (spark-submit's application: the driver is this process)."""
    from pyspark.sql import SparkSession

    import strom.spark
    from strom.spark.runtime import SparkStreams

    spark = SparkSession.builder.getOrCreate()  # spark-submit's master and configs
    strom.spark.register(spark)
    topology, props = build()
    with SparkStreams(topology, {**props, "bootstrap.servers": bootstrap_servers}, spark) as app:
        if not app.wait_until_caught_up(timeout=float(os.environ.get("WORD_COUNT_TIMEOUT_S", "600"))):
            sys.exit("word count did not catch up in time")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
