"""The fault tests' topology (``topology.py``: every component on a host of its own), started once for
the scenarios of every module that asks for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .topology import Topology, running_topology


@pytest.fixture(scope="package")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    with running_topology(tmp_path_factory.mktemp("faults-topology")) as running:
        yield running
