"""The topology the network-fault scenarios run (issue 39), every component on a host of its own:

    kafka-0, kafka-1, kafka-2     a 3-node Apache Kafka cluster (replication 3, min.insync.replicas 2)
    master, worker-0, worker-1    a Spark standalone cluster, one executor (one core) per worker
    driver                        spark-submit of tests/spark/runtime/wordcount.py: the word count with a
                                  repartition step and a RocksDB store, exactly_once_v2, strom's defaults

The test process itself sits on the bridge (``network.gateway``): it writes the input at a steady rate
and reads the output read_committed at the end. ``run_word_count`` runs one scenario: the application
starts, input flows, the scenario's fault is made and healed, and the time from the heal until every
input and repartition record is committed is measured; then every count must be exact and no update
written twice.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spark.runtime.cluster_wordcount import (
    DEFAULTS,
    SteadyWriter,
    WordCountDriver,
    assert_counted_once,
    caught_up,
)
from strom.kafka import clients
from support.apache_kafka import KafkaCluster
from support.hosts import Host, Network
from support.spark_cluster import SparkCluster

WORKERS = 2
LINES_PER_SECOND = 40


@dataclass
class Topology:
    network: Network
    kafka: KafkaCluster
    spark: SparkCluster

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap_servers

    def host(self, name: str) -> Host:
        return self.network.hosts[name]


@contextmanager
def running_topology(base_dir: Path) -> Iterator[Topology]:
    """Every host, the Kafka cluster and the Spark cluster, started once for a module's scenarios."""
    with Network() as network:
        kafka_hosts = [network.host(f"kafka-{i}") for i in range(3)]
        spark_hosts = {name: network.host(name) for name in ("master", "driver",
                                                             *(f"worker-{i}" for i in range(WORKERS)))}
        with KafkaCluster(base_dir / "kafka", brokers=3, hosts=kafka_hosts) as kafka, \
                SparkCluster(base_dir / "spark", workers=WORKERS, hosts=spark_hosts) as spark:
            yield Topology(network, kafka, spark)


@dataclass
class Outcome:
    """What one scenario measured."""

    recovered_s: float
    """From the heal until every input and repartition record was committed."""
    lines: int


def lines_for(seed: int, count: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(20)]
    return [(f"k{i}", " ".join(rng.choices(words, k=rng.randint(1, 4)))) for i in range(count)]


def run_word_count(topology: Topology, tmp_path: Path, name: str,
                   fault: Callable[[WordCountDriver], None], seconds_of_input: float = 90.0,
                   catch_up_s: float = 60.0) -> Outcome:
    """Runs the word count with input arriving steadily, makes ``fault`` (which heals before it returns)
    once every partition commits; checks the output read_committed. The input is ``seconds_of_input``
    long: what is left when ``fault`` returns is written at once."""
    suffix = uuid.uuid4().hex[:8]
    names = {"lines": f"{name}-lines-{suffix}", "counts": f"{name}-counts-{suffix}"}
    clients.create_topics(topology.bootstrap, {names["lines"]: 2, names["counts"]: 2})
    app_id = f"faults-{name}-{suffix}"
    lines = lines_for(hash(name) & 0xFFFF, int(seconds_of_input * LINES_PER_SECOND))
    with WordCountDriver(topology.spark, topology.bootstrap, names, tmp_path, app_id, "realtime", DEFAULTS,
                         cores_max=WORKERS) as driver:
        with SteadyWriter(topology.bootstrap, names["lines"], lines, per_slice=LINES_PER_SECOND // 4):
            driver.all_committing(240)
            fault(driver)
            healed = time.monotonic()
        driver.wait_until(lambda: caught_up(topology.bootstrap, app_id, driver.partitions), catch_up_s + 120,
                          "caught up after the heal")
        outcome = Outcome(time.monotonic() - healed, len(lines))
        driver.finish()
    assert_counted_once(topology.bootstrap, names["counts"], lines)
    print(f"{name}: caught up {outcome.recovered_s:.1f} s after the heal ({len(lines)} lines)")
    assert outcome.recovered_s <= catch_up_s, f"caught up {outcome.recovered_s:.1f} s after the heal"
    return outcome
