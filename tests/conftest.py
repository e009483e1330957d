"""Shared fixtures. `broker`: one embedded strom broker for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strom.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A running strom broker (separate process, temporary data dir); use `.bootstrap_servers`."""
    with EmbeddedBroker() as running:
        yield running
