"""Helpers shared by the streams tests: driver properties with a per-test state directory."""

from __future__ import annotations

import pytest


@pytest.fixture
def props(tmp_path):
    return {
        "application.id": "app",
        "state.dir": str(tmp_path / "state"),
        "default.key.serde": "String",
        "default.value.serde": "String",
    }
