"""Fixtures: ``host`` (one task's store host) and ``make_host`` (several)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .store_host import StoreHost


@pytest.fixture
def host(tmp_path: Path) -> StoreHost:
    return StoreHost(tmp_path)


@pytest.fixture
def make_host(tmp_path: Path):
    """Hosts for several tasks or runs: ``make_host(name, cache_bytes=..., task_id=..., cache=...)``."""
    def make(name: str = "host", **kwargs: Any) -> StoreHost:
        return StoreHost(tmp_path / name, **kwargs)
    return make
