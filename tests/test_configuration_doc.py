"""docs/configuration.md names every key strom accepts, so the page every ConfigError points to is whole."""

from __future__ import annotations

from pathlib import Path

import pytest

import strom.spark.connector.options as connector
from strom.broker.config import BROKER_SPECS, GROUP_SPECS, TOPIC_SPECS
from strom.streams import config as cfg
from strom.tasks.properties import ProcessorProperties

DOC = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()


@pytest.mark.parametrize("key", sorted({*cfg.DEFINITIONS, *cfg.ALIASES, *cfg.IGNORED, *BROKER_SPECS,
                                         *GROUP_SPECS, *TOPIC_SPECS, *connector.SOURCE_OPTIONS,
                                         *connector.SINK_OPTIONS,
                                         *(d.name for d in ProcessorProperties.ALL)}))
def test_every_key_is_documented(key):
    assert f"`{key}`" in DOC


def test_every_error_points_to_a_page_that_exists():
    root = Path(__file__).resolve().parents[1]
    for path in (root / "src" / "strom").rglob("*.py"):
        words = path.read_text().split()
        for page in {w.strip("().,'\"`") for w in words if w.startswith(("docs/", "(docs/"))}:
            assert (root / page.split("#")[0]).exists(), f"{path} points to missing {page}"


def _table_rows(text: str) -> dict[str, str]:
    """`key` -> the default column of every `| `key` | default | ... |` table row."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[1].startswith("`") and cells[1].endswith("`"):
            rows[cells[1].strip("`")] = cells[2]
    return rows


def test_the_broker_page_and_the_configuration_page_give_the_same_defaults():
    broker_page = (Path(__file__).resolve().parents[1] / "docs" / "broker.md").read_text()
    here, there = _table_rows(DOC), _table_rows(broker_page)
    differing = {key: (here[key], there[key]) for key in BROKER_SPECS if key in here and key in there
                 and here[key] != there[key]}
    assert not differing, differing
