"""`strom demo` runs end to end (its own embedded broker, Spark, exactly-once) and verifies itself."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from strom.cli.main import cli

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize(("mode", "rows"), [
    ("realtime", ("first commit", "stream threads", "task commits")),
    ("microbatch", ("first micro-batch", "later micro-batches")),
])
def test_demo_counts_page_views_exactly_once_and_verifies(spark, mode, rows):
    arguments = ["demo", "--records", "3000", "--timeout", "150", "--execution-mode", mode]
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 0, result.output
    assert "verification" in result.output and "OK" in result.output
    assert "3,000" in result.output  # records in
    assert "10 pages, 3,000 views" in result.output  # the interactive query of the counts store
    for row in rows:
        assert row in result.output


def test_demo_on_a_named_cluster_with_client_properties(spark, any_broker, tmp_path):
    """-b, --command-config and -X reach the demo's clients and the application's: it runs on the
    given cluster (strom broker, the 3-node Apache Kafka cluster; no embedded one) with the properties
    set."""
    config = tmp_path / "client.properties"
    config.write_text(f"bootstrap.servers={any_broker.bootstrap_servers}\nclient.id=strom-demo-test\n")
    arguments = ["demo", "--records", "2000", "--timeout", "150", "--command-config", str(config),
                 "-X", "socket.keepalive.enable=true"]
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 0, result.output
    assert "Embedded broker" not in result.output
    assert "10 pages, 2,000 views" in result.output and "OK" in result.output
