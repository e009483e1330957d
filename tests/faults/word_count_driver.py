"""The fault scenarios' word-count driver, which spark-submit runs on host ``driver``, with
``wordcount.py``'s arguments. It is ``wordcount.py``'s, with two differences. Its Spark session, and with
it the executors, starts at once, while the Kafka cluster may still be starting (``topology.py``): the
application starts once the cluster serves its input and output topics. And it waits for its input to
end (INPUT_DONE) for as long as the scenarios run, not ``wordcount.INPUT_WAIT_S``.
"""

from __future__ import annotations

import sys
import time

import wordcount
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

SCENARIOS_S = 3600.0
"""Longer than the package's tests take at any load seen; their fixture ends the driver anyway."""


def serving(admin: AdminClient, topics: list[str]) -> bool:
    try:
        listed = admin.list_topics(timeout=5).topics
    except KafkaException:  # no node serves yet
        return False
    return all(topic in listed and listed[topic].error is None for topic in topics)


def main(bootstrap: str, lines: str, counts: str, *args: str) -> None:
    SparkSession.builder.getOrCreate()
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})  # not each refused connection
    while not serving(admin, [lines, counts]):
        time.sleep(1)
    wordcount.INPUT_WAIT_S = SCENARIOS_S
    wordcount.main(bootstrap, lines, counts, *args)


if __name__ == "__main__":
    main(*sys.argv[1:9])
