"""The `strom` fixture: the command run in-process against the session's broker; `cluster`: one Spark
standalone cluster for the tests that submit to it."""

from collections.abc import Iterator

import pytest

from cli.strom_cli import strom  # noqa: F401
from support.spark_cluster import SparkCluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[SparkCluster]:
    """One worker with two cores and no Python of this venv in its environment: an application names its
    executors' Python (this venv's, or a packed environment's) as on a cluster that only has Spark."""
    with SparkCluster(tmp_path_factory.mktemp("cluster"), workers=1, cores_per_worker=2,
                      python=None) as running:
        yield running
