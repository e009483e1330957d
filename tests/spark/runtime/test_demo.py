"""`strom demo` runs end to end (its own embedded broker, Spark, exactly-once) and verifies itself."""

from __future__ import annotations

import subprocess

import pytest
from click.testing import CliRunner

from strom.cli.demo import DemoResult
from strom.cli.main import cli
from support.processes import STROM

pytestmark = [pytest.mark.spark, pytest.mark.slow]



FIGURES = ("start-up: Spark session", "start-up: application start to first record committed",
           "steady rate (first page view written to last commit)",
           "end-to-end latency p50 / p99 (timestamp to read_committed)")


@pytest.mark.parametrize(("mode", "rows"), [
    ("realtime", (*FIGURES, "stream threads", "task commits")),
    ("microbatch", (*FIGURES, "micro-batches (one per commit)", "task batches")),
])
def test_demo_counts_page_views_exactly_once_and_verifies(spark, mode, rows):
    arguments = ["demo", "--records", "3000", "--timeout", "150", "--execution-mode", mode]
    result = CliRunner().invoke(cli, arguments, env={"COLUMNS": "200"})  # rows unwrapped
    assert result.exit_code == 0, result.output
    assert "verification" in result.output and "OK" in result.output
    assert "3,000" in result.output  # page views measured
    assert "10 pages, 3,200 views" in result.output  # the interactive query: the warm-up's and the measured
    for row in rows:
        assert row in result.output


def test_demo_on_a_named_cluster_with_client_properties(any_broker, tmp_path):
    """--command-config and -X reach the demo's clients and the application's: it runs on the given
    cluster (strom broker, the 3-node Apache Kafka cluster; no embedded one) with the properties set.
    Run as a user runs it, in a process of its own (the strom broker under test stays in this one)."""
    config = tmp_path / "client.properties"
    config.write_text(f"bootstrap.servers={any_broker.bootstrap_servers}\nclient.id=strom-demo-test\n")
    arguments = ["demo", "--records", "2000", "--timeout", "150", "--command-config", str(config),
                 "-X", "socket.keepalive.enable=true"]
    result = subprocess.run([STROM, *arguments], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Embedded broker" not in output
    assert "10 pages, 2,200 views" in output and "OK" in output


def test_the_demo_figures_say_what_they_measure():
    result = DemoResult(records_in=10_000, processing_s=0.5, latencies_ms=[float(ms) for ms in range(1, 101)])
    assert result.rate == 20_000
    assert (result.latency_ms(0.5), result.latency_ms(0.99)) == (50.0, 99.0)
    assert DemoResult().latency_ms(0.5) is None and DemoResult().rate is None
