"""Packaging: the layers without Spark import without PySpark; the wheel carries LICENSE, py.typed and
compatible ranges (no pins); constraints.txt pins what pyproject allows."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SPARK_ONLY = ("pyspark", "pyarrow", "pandas", "py4j")

# Imports of Spark-only packages fail, as in an environment installed without the `spark` extra.
_BLOCK = f"""
import sys
class _NoSpark:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {SPARK_ONLY!r}:
            raise ImportError(f"{{name}} is blocked: strom must not need it here")
        return None
sys.meta_path.insert(0, _NoSpark())
"""


def _run_without_spark(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BLOCK + code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_the_block_really_blocks():
    result = _run_without_spark("import strom.spark.runtime")
    assert result.returncode != 0 and "blocked" in result.stderr


def test_layers_without_spark_import_without_pyspark():
    result = _run_without_spark(
        "import strom.broker, strom.kafka.clients, strom.kafka.serdes, strom.tasks, strom.streams\n"
        "import strom.streams.config, strom.prometheus, strom.kafka.offsets, strom.tasks.prometheus\n"
        "import strom.broker.metrics\n"
        f"assert not any(m.split('.')[0] in {SPARK_ONLY!r} for m in sys.modules), sorted(sys.modules)\n")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("command", [
    ["--help"], ["broker", "--help"], ["topics", "--help"], ["produce", "--help"], ["consume", "--help"],
    ["tasks", "run", "--help"], ["transactions", "--help"], ["streams", "reset", "--help"],
    ["run", "--help"],
    ["preflight"],
])
def test_cli_commands_without_spark_run_without_pyspark(command):
    result = _run_without_spark(f"sys.argv = ['strom', *{command!r}]\n"
                                "from strom.cli.main import main\n"
                                "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n")
    assert result.returncode == 0, result.stderr + result.stdout


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements() -> list[Requirement]:
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in project["dependencies"] + [r for rs in extras.values() for r in rs]
            if not r.startswith("strom[")]


def test_dependencies_are_ranges_not_pins():
    pinned = [str(r) for r in _requirements() if any(s.operator == "==" for s in r.specifier)]
    assert not pinned


def test_spark_packages_are_only_in_the_spark_extra():
    project = _pyproject()["project"]
    core = {Requirement(r).name for r in project["dependencies"]}
    assert not core & set(SPARK_ONLY)
    assert {Requirement(r).name for r in project["optional-dependencies"]["spark"]} >= {"pyspark", "pyarrow"}


def test_constraints_pin_versions_the_ranges_allow():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    for requirement in _requirements():
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} outside {requirement}"


@pytest.mark.slow
def test_wheel_carries_license_typing_marker_and_extras(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path),
                    str(ROOT)], check=True, timeout=300, capture_output=True)
    (wheel,) = tmp_path.glob("strom-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    assert "strom/py.typed" in names
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert metadata["License-Expression"] == "Apache-2.0"
    requires = metadata.get_all("Requires-Dist")
    spark = [r for r in requires if r.startswith("pyspark")]
    assert spark and all('extra == "spark"' in r for r in spark)
    assert "Typing :: Typed" in metadata.get_all("Classifier")
