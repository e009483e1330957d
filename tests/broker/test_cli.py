"""`strom topics`, `strom produce` and `strom consume` against the broker; `strom broker` start-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from broker_helpers import unique
from click.testing import CliRunner

from strom.cli.main import cli

pytestmark = pytest.mark.broker
STROM = str(Path(sys.executable).parent / "strom")


def _run(args: list[str], stdin: str | None = None) -> str:
    result = CliRunner().invoke(cli, args, input=stdin, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_topics_produce_consume_round_trip(broker):
    bootstrap = ["--bootstrap-servers", broker.bootstrap_servers]
    topic = unique("cli")
    _run(["topics", "create", topic, "--partitions", "2", "--config", "retention.ms=60000", *bootstrap])
    assert f"{topic}\t2" in _run(["topics", "list", *bootstrap]).splitlines()
    described = _run(["topics", "describe", topic, *bootstrap])
    assert "retention.ms" in described and "60000" in described

    _run(["produce", topic, "--key-separator", ":", "--header", "origin=cli", *bootstrap],
         stdin="k1:first\nk2:second\nk1:third\n")
    printed = _run(["consume", topic, "--from-beginning", "--max-messages", "3", "--print-key",
                    "--print-headers", *bootstrap]).splitlines()
    expected = ["origin=cli\tk1\tfirst", "origin=cli\tk2\tsecond", "origin=cli\tk1\tthird"]
    assert sorted(printed) == sorted(expected)
    key_order = [line.split("\t")[2] for line in printed if "\tk1\t" in line]
    assert key_order == ["first", "third"], "records of one key keep their order"

    _run(["topics", "delete", topic, *bootstrap])
    assert topic not in _run(["topics", "list", *bootstrap])


def test_cli_errors_are_one_line_with_exit_code_2(broker):
    bootstrap = ["--bootstrap-servers", broker.bootstrap_servers]
    topic = unique("dup")
    _run(["topics", "create", topic, *bootstrap])
    for args in (["topics", "create", topic, *bootstrap],
                 ["topics", "describe", unique("missing"), *bootstrap],
                 ["broker", "--port", "0", "--config", "num.partitons=3"]):
        process = subprocess.run([STROM, *args], capture_output=True, text=True, timeout=60)
        assert process.returncode == 2, process.stderr
        assert process.stderr.startswith("error: ")
    assert "Did you mean 'num.partitions'" in process.stderr
