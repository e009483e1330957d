"""Shared fixtures. `broker`: one embedded strom broker for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strom.broker import EmbeddedBroker

# No time-based retention pass during the session: tests write records stamped early in 1970 (window
# arithmetic is easier to read), which a pass would delete between produce and read. Retention itself
# is tested on brokers of its own (tests/broker/test_admin_ops.py).
NO_RETENTION_PASS = {"log.retention.check.interval.ms": 24 * 60 * 60 * 1000}


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """A running strom broker (separate process, temporary data dir); use `.bootstrap_servers`."""
    with EmbeddedBroker(config=NO_RETENTION_PASS) as running:
        yield running
