"""Differential tests: the same topology spec and input through Kafka Streams (the Java library, 4.1.1)
and through strom must give the same output records, byte for byte, and the same store contents.

STROM_ORACLE_CASES sets how many generated cases run (default 500, shared over the families below), always
the same ones (derandomized: `make test` is repeatable and its time bounded); STROM_ORACLE_EXPLORE=1 draws
new ones each run, ``--hypothesis-seed`` replaying a run. A failing case, shrunk by hypothesis, is written
to .cache/oracle/failed/<test>.json: keep it as a regression case in tests/oracle/cases/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from oracle import strategies, translate
from oracle.java_oracle import KAFKA_POM, ORACLE_POM, ROOT, JavaOracle, kafka_version

CASES = Path(__file__).parent / "cases"
KNOWN_DIFFERENCES = Path(__file__).parent / "known_differences"
FAILED = ROOT / ".cache" / "oracle" / "failed"
TOTAL = int(os.environ.get("STROM_ORACLE_CASES", "500"))
EXPLORE = bool(os.environ.get("STROM_ORACLE_EXPLORE"))
# The share of the cases each family gets.
SHARES = {"stream": 0.25, "table": 0.25, "windowed": 0.25, "serdes": 0.25}


def examples(family: str) -> settings:
    repeatable: dict[str, Any] = {} if EXPLORE else {"derandomize": True, "database": None}
    return settings(max_examples=max(1, round(TOTAL * SHARES[family])), deadline=None, **repeatable,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def check(oracle: JavaOracle, spec: dict[str, Any], name: str) -> None:
    expected = oracle.run(spec)
    assert "error" not in expected, f"Kafka Streams rejected the spec (a generator bug): {expected['error']}"
    actual = translate.run(spec)
    for store in spec.get("stores", []):
        if store.get("unordered"):  # docs/streams.md: the store of an aggregation that emits on close
            for result in (expected, actual):
                result["stores"][store["name"]].sort(key=json.dumps)
    if actual != expected:
        FAILED.mkdir(parents=True, exist_ok=True)
        (FAILED / f"{name}.json").write_text(json.dumps(spec, indent=1) + "\n")
    assert actual == expected, f"strom differs from Kafka Streams on:\n{json.dumps(spec)}"


def test_the_oracle_runs_the_kafka_version_the_apache_kafka_tests_pin() -> None:
    assert kafka_version(ORACLE_POM) == kafka_version(KAFKA_POM)


@pytest.mark.parametrize("path", sorted(CASES.glob("*.json")), ids=lambda p: p.stem)
def test_regression_case(java_oracle: JavaOracle, path: Path) -> None:
    check(java_oracle, json.loads(path.read_text()), path.stem)


@pytest.mark.parametrize("path", sorted(KNOWN_DIFFERENCES.glob("*.json")), ids=lambda p: p.stem)
def test_known_difference_still_differs(java_oracle: JavaOracle, path: Path) -> None:
    """Each kept case of a difference docs/streams.md lists still shows it: once Kafka Streams or strom
    changes, its exclusion goes (and the case becomes a regression case)."""
    name = next((name for name in strategies.EXCLUDED if path.stem.startswith(name)), None)
    assert name is not None, f"{path.name} is named after no variant in strategies.EXCLUDED"
    spec = json.loads(path.read_text())
    agreed = f"strom now agrees with Kafka Streams on {name}: drop its exclusion"
    assert translate.run(spec) != java_oracle.run(spec), agreed


@examples("stream")
@given(spec=strategies.topologies("stream"))
def test_generated_stream_topologies(java_oracle: JavaOracle, spec: dict[str, Any]) -> None:
    check(java_oracle, spec, "stream")


@examples("table")
@given(spec=strategies.topologies("table"))
def test_generated_table_topologies(java_oracle: JavaOracle, spec: dict[str, Any]) -> None:
    check(java_oracle, spec, "table")


@examples("windowed")
@given(spec=strategies.topologies("windowed"))
def test_generated_windowed_topologies(java_oracle: JavaOracle, spec: dict[str, Any]) -> None:
    check(java_oracle, spec, "windowed")


@examples("serdes")
@given(spec=strategies.serde_cases())
def test_generated_serde_round_trips(java_oracle: JavaOracle, spec: dict[str, Any]) -> None:
    check(java_oracle, spec, "serdes")
