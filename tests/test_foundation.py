"""The package, its errors, the Java preflight and the CLI skeleton."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import strom
from strom.cli.main import cli
from strom.errors import ConfigError, JavaNotFoundError, StromError
from strom.spark.preflight import check_java, parse_java_version


def test_version_is_the_one_in_pyproject():
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert strom.__version__ == pyproject["project"]["version"]


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "11.0.2-ea" 2019-01-15', 11),
    ],
)
def test_parse_java_version(output, major):
    assert parse_java_version(output)[0] == major


def test_missing_java_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="Install Java 17"):
        check_java()


def test_old_java_is_rejected(monkeypatch, tmp_path):
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho \'java version "1.8.0_392"\' >&2\n')
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match=r"is Java 1\.8\.0_392"):
        check_java()


def test_real_java_passes_preflight():
    assert check_java().major >= 17


def test_config_error_suggests_close_key():
    err = ConfigError.unknown_key("commit.intervl.ms", ["commit.interval.ms", "application.id"])
    assert isinstance(err, StromError)
    assert "'commit.interval.ms'" in str(err)


def test_cli_version_and_help():
    runner = CliRunner()
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert strom.__version__ in result.output
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "preflight" in result.output


def test_console_script_reports_strom_errors_without_traceback(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    env.pop("JAVA_HOME", None)
    strom_script = Path(sys.executable).with_name("strom")
    result = subprocess.run([str(strom_script), "preflight"], env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert "error: Spark needs Java 17+" in result.stderr
    assert "Traceback" not in result.stderr


def test_readme_first_topology_runs_as_shown(capsys):
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    code = readme.split("```python", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == ["[('hello', 1), ('world', 1), ('hello', 2)]", "2"]
