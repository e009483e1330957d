"""Scenarios 1-6 of issue 39: network faults while the exactly_once_v2 word count runs on Spark with
every component on a host of its own (``topology.py``); after each, every count exact, no update
written twice (read_committed), caught up within 60 s of the heal. The hosts and clusters are the
module's (started once); each scenario runs its own application on fresh topics."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from .topology import Topology, run_word_count, running_topology

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(900)]

SILENT_S = 10.0  # strom.spark.runtime.control.SILENT_S: a thread not heard from this long is lost


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    with running_topology(tmp_path_factory.mktemp("faults-topology")) as running:
        yield running


@pytest.fixture(autouse=True)
def _healed(topology: Topology) -> Iterator[None]:
    yield
    topology.network.heal()


def test_an_executor_cut_off_from_the_driver_but_not_from_kafka(topology, tmp_path):
    """Scenario 1, the zombie: worker-0 (its executor and Python workers) cannot reach the driver for
    2.5 times the driver's loss detection, but still reaches Kafka; its tasks move to worker-1, and it
    must not commit again (the new owner's transactions fence its transactional ids)."""
    def cut(driver):
        topology.network.partition(topology.host("worker-0"), topology.host("driver"))
        cut_at = time.monotonic()
        moved = driver.resumed_after(cut_at, 2.5 * SILENT_S)
        assert len(moved) == len(driver.partitions), f"partitions that moved on: {moved}\n{driver.logs()}"

    run_word_count(topology, tmp_path, "zombie", cut)
