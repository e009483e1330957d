"""The fault tests' topology (``topology.py``: every component on a host of its own) and the two
applications its scenarios run, each started once for the package. The word count's driver is submitted
as soon as Spark runs, while Kafka starts; its input flows from its topics' creation until every
partition committed, in a thread of its own; the subscription starts once Kafka serves; both before
scenario 8 runs (``test_broker_transaction.py`` asks for them): the word count's start, the longest
wait of these tests on a busy machine, overlaps Kafka's start, that scenario and the harness's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .tasks_run import TasksRun
from .topology import Topology, WordCountRun, running_topology


@pytest.fixture(scope="package")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    with running_topology(tmp_path_factory.mktemp("faults-topology")) as running:
        yield running


@pytest.fixture(scope="package")
def word_count(topology: Topology, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WordCountRun]:
    run = WordCountRun(topology, tmp_path_factory.mktemp("word-count"))  # submitted, not waited for
    try:
        yield run
        run.close()
    finally:
        run.driver.kill()


@pytest.fixture(scope="package")
def tasks(topology: Topology, word_count: WordCountRun, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[TasksRun]:
    """The subscription beside the word count (started after its driver's submission)."""
    run = TasksRun(topology, tmp_path_factory.mktemp("tasks"))
    try:
        yield run
    finally:
        run.close()
