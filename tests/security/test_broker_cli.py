"""`strom broker` secured, as an operator runs it: add-user, listeners from --config, refusing an open
network listener, start-up errors that name the key to fix and never the secret."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from support.certificates import KEY_PASSWORD
from support.processes import STROM

pytestmark = pytest.mark.slow  # each test starts `strom` processes


def strom(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([STROM, *args], input=stdin, capture_output=True, text=True, timeout=60)


def start(*args: str) -> tuple[subprocess.Popen, dict[str, int], Path]:
    """`strom broker ARGS` running; its listeners' ports by name once it listens."""
    log = Path(args[args.index("--data-dir") + 1]).parent / f"broker-{time.monotonic_ns()}.log"
    with open(log, "w") as out:
        process = subprocess.Popen([STROM, "broker", *args], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "Ctrl-C to stop" not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    found = re.findall(r"listening on \S+?:(\d+) \((\w+)[,;]", log.read_text())
    ports = {name: int(port) for port, name in found}
    return process, ports, log


def test_add_user_then_log_in_over_sasl_ssl_and_the_data_dir_is_locked_while_running(tmp_path, pki):
    data = tmp_path / "data"
    added = strom("broker", "add-user", "alice", "--data-dir", str(data), "--password-stdin",
                  stdin="s3cret-pw\n")
    assert added.returncode == 0, added.stderr
    assert "user alice added" in added.stderr and "s3cret-pw" not in added.stderr + added.stdout
    assert "s3cret-pw" not in (data / "security" / "scram-credentials.json").read_text()
    process, ports, _ = start("--data-dir", str(data), "--config", "listeners=SASL_SSL://127.0.0.1:0",
                                "--config", f"ssl.keystore.location={pki.broker}")
    try:
        conf = {"bootstrap.servers": f"127.0.0.1:{ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "s3cret-pw",
                "ssl.ca.location": str(pki.ca)}
        assert AdminClient(conf).list_topics(timeout=10).brokers[0].port == ports["SASL_SSL"]
        busy = strom("broker", "add-user", "bob", "--data-dir", str(data), "--password-stdin", stdin="x\n")
        assert busy.returncode == 2 and "used by another strom broker" in busy.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0


def test_an_open_listener_beyond_loopback_is_refused_unless_allowed(tmp_path, pki):
    refused = strom("broker", "--data-dir", str(tmp_path / "a"), "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2
    assert "does not authenticate clients" in refused.stderr and "--allow-unauthenticated-network-access" in (
        refused.stderr)
    assert not (tmp_path / "a").exists()  # refused before the data directory is touched
    tls_only = strom("broker", "--data-dir", str(tmp_path / "b"), "--config", "listeners=SSL://0.0.0.0:0",
                     "--config", f"ssl.keystore.location={pki.broker}")
    assert tls_only.returncode == 2 and "Listener SSL (SSL on 0.0.0.0:" in tls_only.stderr
    process, ports, _ = start("--data-dir", str(tmp_path / "c"), "--config", "listeners=SASL_SSL://0.0.0.0:0",
                              "--config", f"ssl.keystore.location={pki.broker}")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0 and ports["SASL_SSL"]
    process, ports, _ = start("--data-dir", str(tmp_path / "d"), "--host", "0.0.0.0", "--port", "0",
                              "--allow-unauthenticated-network-access")
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0 and ports["PLAINTEXT"]


@pytest.mark.parametrize(("configs", "wanted"), [
    (["listeners=SASL_SSL://127.0.0.1:0"], "A TLS listener (SSL or SASL_SSL) needs ssl.keystore.location"),
    (["listeners=SSL://127.0.0.1:0", "ssl.keystore.location=/nonexistent.pem"],
     "Cannot read ssl.keystore.location=/nonexistent.pem: no such file."),
    (["listeners=SSL://127.0.0.1:0", "ssl.keystore.location={encrypted}", "ssl.key.password=wrong-password"],
     "ssl.key.password must decrypt the key"),
    (["listeners=SSL://127.0.0.1:0", "ssl.keystore.location={broker}", "ssl.client.auth=required"],
     "ssl.client.auth=required needs ssl.truststore.location"),
    (["listeners=CLIENT://127.0.0.1:0"], "listener CLIENT has no security protocol"),
    (["advertised.listeners=SSL://example:1"], "advertised.listeners names SSL, which is not in listeners"),
    (["ssl.keystore.type=JKS"], "expected PEM"),
    (["listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER"],
     "listener.name.oauth.* configures listener OAUTH, which is not in listeners"),
    (["listener.name.plaintext.ssl.keystore.password=x"],
     "Unknown configuration key 'listener.name.plaintext.ssl.keystore.password': strom broker takes"),
    (["listeners=SSL://127.0.0.1:0", "ssl.keystore.location={broker}",
      "listener.name.ssl.ssl.keystore.location={encrypted}",
      "listener.name.ssl.ssl.key.password=wrong-password"],
     "listener.name.ssl.ssl.key.password must decrypt the key"),
    (["listener.name.plaintext.plain.sasl.jaas.config="
      'org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="wrong-password"'],
     "Invalid value for configuration 'listener.name.plaintext.plain.sasl.jaas.config' (not shown: it holds "
     "secrets): expected one login module"),
    # Kafka's broker does not start without its identity provider's keys either
    (["listeners=SASL_SSL://127.0.0.1:0", "ssl.keystore.location={broker}",
      "listener.name.sasl_ssl.sasl.enabled.mechanisms=OAUTHBEARER",
      "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url=http://127.0.0.1:9/jwks",
      "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms=0"],  # one attempt: no "trying again" lines
     "Cannot start listener SASL_SSL: cannot fetch the JWKS from http://127.0.0.1:9/jwks: "),
    (["listeners=SASL_SSL://127.0.0.1:0", "ssl.keystore.location={broker}",
      "listener.name.sasl_ssl.sasl.enabled.mechanisms=OAUTHBEARER",
      "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class="
      "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"],
     "OAuthBearerValidatorCallbackHandler, which needs sasl.oauthbearer.jwks.endpoint.url"),
])
def test_a_bad_security_config_ends_in_one_line_without_the_secret(tmp_path, pki, configs, wanted):
    args = []
    for config in configs:
        args += ["--config", config.format(encrypted=pki.broker_encrypted, broker=pki.broker)]
    result = strom("broker", "--data-dir", str(tmp_path / "data"), "--port", "0", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and wanted in lines[0], result.stderr
    assert "wrong-password" not in result.stderr and KEY_PASSWORD not in result.stderr


def test_an_encrypted_key_with_its_password_serves_tls(tmp_path, pki):
    process, ports, log = start("--data-dir", str(tmp_path / "data"), "--config", "listeners=SSL://127.0.0.1:0",
                                "--config", f"ssl.keystore.location={pki.broker_encrypted}",
                                "--config", f"ssl.key.password={KEY_PASSWORD}")
    try:
        conf = {"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca)}
        assert AdminClient(conf).list_topics(timeout=10).brokers
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    assert KEY_PASSWORD not in log.read_text()
