"""-b/--bootstrap-servers, STROM_BOOTSTRAP_SERVERS, -X key=value and --command-config FILE."""

from __future__ import annotations

import pytest

from cli.strom_cli import unique
from strom.cli.connection import Connection
from strom.errors import ConfigError
from strom.kafka.clients import load_properties
from strom.streams import StreamsConfig

pytestmark = pytest.mark.broker


def test_a_properties_file_gives_the_bootstrap_servers_and_client_settings(strom, tmp_path, monkeypatch):
    topic = unique("cfg")
    strom.ok("topics", "create", topic)
    config = tmp_path / "client.properties"
    config.write_text(f"# as Kafka's tools take it\nbootstrap.servers = {strom.bootstrap}\n"
                      "client.id: strom-cli-test\nsocket.timeout.ms 20000\n")
    monkeypatch.delenv("STROM_BOOTSTRAP_SERVERS")
    strom.ok("produce", topic, "--command-config", str(config), stdin=b"via-file\n")
    shown = strom.ok("consume", topic, "--command-config", str(config), "-o", "beginning", "-e").lines
    assert shown == ["via-file"]


def test_a_bad_client_property_is_one_error_line_naming_it(strom, tmp_path):
    line = strom.fails("topics", "list", "-X", "no.such.property=1")
    assert "no.such.property" in line and "librdkafka" in line
    config = tmp_path / "bad.properties"
    config.write_text("acks=all\nenable.idempotence=maybe\n")
    line = strom.fails("produce", "t", "--command-config", str(config))
    assert "enable.idempotence" in line
    assert "not key=value" in strom.fails("topics", "list", "-X", "acks")
    assert "Cannot read the client properties file" in strom.fails(
        "topics", "list", "--command-config", str(tmp_path / "missing.properties"))


def test_x_overrides_the_command_config_file_and_the_commands_defaults(strom, tmp_path):
    """The file allows 3 MB records; -X puts the limit back at 1 MB, so the client refuses a 2 MB line."""
    topic = unique("x")
    strom.ok("topics", "create", topic)
    config = tmp_path / "big.properties"
    config.write_text("message.max.bytes=3000000\n")
    big = b"z" * 2_000_000 + b"\n"
    broker_refusal = strom.fails("produce", topic, "--command-config", str(config), stdin=big)
    client_refusal = strom.fails("produce", topic, "--command-config", str(config),
                                 "-X", "message.max.bytes=1000000", stdin=big)
    assert "(2000000 bytes)" not in broker_refusal  # refused by the broker, after the client sent it
    assert "(2000000 bytes)" in client_refusal  # refused by the client before sending


def test_load_properties_reads_java_syntax_and_a_jaas_login(tmp_path):
    path = tmp_path / "secure.properties"
    path.write_text("! comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
                    '    username="alice" password="s3cr=t";\n\n  ssl.ca.location : /etc/ca.pem\n')
    assert load_properties(path) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                     "sasl.username": "alice", "sasl.password": "s3cr=t",
                                     "ssl.ca.location": "/etc/ca.pem"}
    path.write_text("sasl.jaas.config=com.example.Kerberos required;\n")
    with pytest.raises(ConfigError, match=r"sasl\.username"):
        load_properties(path)


def test_the_demo_takes_the_connection_options(strom):
    """`strom demo -X ...` builds its clients from them: a bad property is one error line, before Spark."""
    line = strom.fails("demo", "--records", "10", "-X", "no.such.property=1")
    assert "no.such.property" in line and "librdkafka" in line


def test_a_connection_as_an_applications_config_reaches_each_client():
    """Security keys go to every client as Kafka Streams gives them; the rest to each client by prefix."""
    connection = Connection("host:9093", {"security.protocol": "SASL_SSL", "sasl.username": "alice",
                                          "socket.timeout.ms": "20000"})
    config = StreamsConfig({**connection.streams_config(), "application.id": "app"})
    assert config["bootstrap.servers"] == "host:9093"
    for client in ("producer.", "main.consumer.", "restore.consumer.", "admin."):
        assert config.client_props(client) == {"security.protocol": "SASL_SSL", "sasl.username": "alice",
                                               "socket.timeout.ms": "20000"}, client
