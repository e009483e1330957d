"""`strom topics`, `strom produce` and `strom consume` against the broker; `strom broker` start-up."""

from __future__ import annotations

import socket
import sys

import pytest
from broker_helpers import unique
from click.testing import CliRunner

from strom.cli.main import cli, main

pytestmark = pytest.mark.broker


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


def test_cli_errors_are_one_line_with_exit_code_2(broker, monkeypatch, capsys, tmp_path):
    bootstrap = ["--bootstrap-servers", broker.bootstrap_servers]
    topic = unique("dup")
    _run(["topics", "create", topic, *bootstrap])
    taken = socket.create_server(("127.0.0.1", 0))
    busy_port = str(taken.getsockname()[1])
    for args in (["topics", "create", topic, *bootstrap],
                 ["topics", "describe", unique("missing"), *bootstrap],
                 ["broker", "--data-dir", str(tmp_path / "busy"), "--port", busy_port],
                 ["broker", "--data-dir", str(tmp_path), "--port", "0", "--config", "num.partitons=3"]):
        monkeypatch.setattr(sys, "argv", ["strom", *args])
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code == 2
        stderr = capsys.readouterr().err
        assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    taken.close()
    assert "Did you mean 'num.partitions'" in stderr
