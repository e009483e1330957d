"""The Java oracle, started once per session (`make oracle` builds it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oracle.java_oracle import JavaOracle


@pytest.fixture(scope="session")
def java_oracle() -> Iterator[JavaOracle]:
    oracle = JavaOracle()
    try:
        yield oracle
    finally:
        oracle.close()
