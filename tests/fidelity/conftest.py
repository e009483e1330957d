"""The `peers` fixture: one Apache Kafka node and strom broker, side by side (see fidelity_helpers)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fidelity_helpers import Peers, target, warm_up


@pytest.fixture(scope="session")
def peers(kafka_node: Any, broker: Any) -> Iterator[Peers]:
    pair = Peers(target("apache-kafka", kafka_node.bootstrap_servers),
                 target("strom-broker", broker.bootstrap_servers))
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(warm_up, (pair.kafka, pair.strom)))
    yield pair
