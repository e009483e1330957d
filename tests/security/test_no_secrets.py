"""No secret shows anywhere: a secured strom broker (`strom -vv broker`: DEBUG, an encrypted key with its
ssl.key.password, also as the SSL listener's own keys, and a PLAIN user in the SASL_SSL listener's JAAS
config) and strom's clients (librdkafka's debug log on, every strom logger at DEBUG) log in,
work, are refused and fail, and everything they say is grepped for the passwords and the private keys'
bodies: log lines at every level, exceptions with their tracebacks, a subscription's metrics and its
Prometheus exposition, the broker's metrics and described configs, the CLI's stdout and stderr at -vv."""

from __future__ import annotations

import json
import logging
import subprocess
import traceback
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import ConfigResource
from prometheus_client import CollectorRegistry, generate_latest

from security.conftest import PASSWORDS
from strom.broker.security.credentials import add_scram_user
from strom.broker.security.scram import Mechanism
from strom.kafka import clients
from strom.kafka.transactional import TransactionalProducer
from strom.kafka.wire import WireClient
from strom.tasks import ProcessorsBuilder, RetryConfig, SubscriptionBuilder
from strom.tasks.prometheus import SubscriptionCollector
from support.certificates import KEY_PASSWORD, Pki
from support.kafka import unique, wait_for
from support.processes import STROM, free_port
from support.secured_clients import grant, sasl_settings, subscription_acls

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DEBUG_CLIENT = {"debug": "security,broker,protocol,conf,generic"}  # librdkafka's own debug log
JAAS_PASSWORD = "carol-jaas-pw-4Rt"  # carol's, a PLAIN user of the SASL_SSL listener's JAAS config
PLAIN_JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="{JAAS_PASSWORD}";'


def secrets(pki: Pki) -> list[str]:
    """The passwords, and each line of the private keys' PEM bodies."""
    keys = [line for path in (pki.client_key, pki.broker_key, pki.broker_encrypted)
            for line in path.read_text().splitlines() if line and not line.startswith("-----")
            and not line.startswith(("Proc-Type", "DEK-Info"))]
    return [*PASSWORDS.values(), KEY_PASSWORD, JAAS_PASSWORD, *keys]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[dict]:
    """`strom -vv broker` with a SASL_SSL and a mutual-TLS listener, its key encrypted, ACLs on."""
    data = tmp_path_factory.mktemp("no-secrets")
    for user, password in PASSWORDS.items():
        add_scram_user(data, user, password, list(Mechanism), 4096)
    sasl_port, tls_port, metrics_port = free_port(), free_port(), free_port()
    config = {"listeners": f"SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{tls_port}",
              "ssl.keystore.location": str(pki.broker_encrypted), "ssl.key.password": KEY_PASSWORD,
              "ssl.truststore.location": str(pki.ca), "ssl.client.auth": "required",
              "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
              "listener.name.ssl.ssl.keystore.location": str(pki.broker_encrypted),
              "listener.name.ssl.ssl.key.password": KEY_PASSWORD,
              "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
              "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:admin"}
    log = data / "stderr.log"
    with log.open("wb") as out:
        process = subprocess.Popen([STROM, "-vv", "broker", "--data-dir", str(data), "--metrics-port",
                                    str(metrics_port), *(a for k, v in config.items()
                                                         for a in ("--config", f"{k}={v}"))],
                                   stdout=out, stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: "SASL_SSL" in log.read_text() and _answers(metrics_port), 60), log.read_text()
        yield {"sasl": f"127.0.0.1:{sasl_port}", "tls": f"127.0.0.1:{tls_port}", "log": log,
               "metrics": f"http://127.0.0.1:{metrics_port}/metrics", "data": data}
    finally:
        process.terminate()
        process.wait(30)


def _answers(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).close()
    except OSError:
        return False
    return True


def sasl(broker: dict, pki: Pki, user: str, password: str | None = None) -> dict[str, str]:
    return sasl_settings(broker["sasl"], pki.ca, user, PASSWORDS[user] if password is None else password)


def said(call: Callable[[], object]) -> str:
    """What `call` raises, as a user sees it: message, repr and traceback (empty if it returns)."""
    try:
        call()
    except Exception as exc:  # every failure is grepped, whatever its type
        return f"{exc}\n{exc!r}\n{''.join(traceback.format_exception(exc))}"
    return ""


def test_no_secret_in_logs_errors_metrics_or_cli_output(broker, pki, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="strom.kafka.librdkafka")  # a CLI run in this process quiets it
    admin = clients.admin(broker["sasl"], **sasl(broker, pki, "admin"))
    topic, sub_id = unique("mail"), unique("mailer")
    clients.create_topics(broker["sasl"], {topic: 1}, settings=sasl(broker, pki, "admin"))
    grant(admin, *(b for line in subscription_acls("User:alice", sub_id, topic).values() for b in line))
    producer = clients.producer(broker["sasl"], **sasl(broker, pki, "admin"))
    producer.produce(topic, b"1")
    assert producer.flush(30) == 0
    seen: list[str] = []

    def retry_once(context, task: int) -> None:
        if context.metadata().retry_count == 0:
            context.retry()
        else:
            seen.append(str(task))

    sub = (SubscriptionBuilder.new_builder(sub_id)
           .processors_builder(ProcessorsBuilder.consuming(topic, int).then_process(retry_once))
           .consumer_config({**sasl(broker, pki, "alice"), **DEBUG_CLIENT})
           .enable_retry(RetryConfig.with_backoff(100)).build_and_start())
    registry = CollectorRegistry()
    registry.register(SubscriptionCollector(sub))
    try:
        assert wait_for(lambda: seen == ["1"], 60)
        exposed = [repr(sub.metrics()), generate_latest(registry).decode()]
    finally:
        sub.close()

    carol = {**sasl_settings(broker["sasl"], pki.ca, "carol", JAAS_PASSWORD, "PLAIN"), **DEBUG_CLIENT}
    inline_key = {"bootstrap.servers": broker["tls"], "security.protocol": "SSL",
                  "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.client_cert),
                  "ssl.key.pem": pki.client_key.read_text()}
    failures = [
        said(lambda: TransactionalProducer(broker["sasl"], unique("txn"), "a test",
                                           **sasl(broker, pki, "alice"), **DEBUG_CLIENT).init_transactions()),
        said(lambda: WireClient(broker["sasl"],
                                settings=sasl(broker, pki, "alice", "wrong-" + PASSWORDS["alice"]))),
        said(lambda: clients.producer(broker["sasl"], **sasl(broker, pki, "alice"), **{"no.such.key": 1})),
        said(lambda: clients.producer(broker["tls"], **{**inline_key, "no.such.key": 1})),
        said(lambda: WireClient(broker["sasl"], settings={**carol, "sasl.password": "wrong"})),
        said(lambda: clients.admin(broker["tls"], **inline_key, **DEBUG_CLIENT).list_topics(timeout=10)),
        said(lambda: WireClient(broker["sasl"], settings=carol).close()),
        said(lambda: clients.admin(broker["sasl"], **carol).list_topics(timeout=10)),
    ]
    assert all(failures[:5]) and not any(failures[5:]), failures  # the first five are refused

    settings = [a for k, v in sasl(broker, pki, "alice").items() if k != "bootstrap.servers"
                for a in ("-X", f"{k}={v}")]
    cli = [subprocess.run([STROM, "-vv", *args, "-b", broker["sasl"], *settings], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
           for args in (("topics", "list"), ("transactions", "list"), ("consume", topic, "-e"),
                        ("produce", topic))]
    assert any("may not" in done.stderr for done in cli)  # a refusal was said, and grepped below

    described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")])
    broker_configs = repr({e.name: e.value for f in described.values() for e in f.result().values()})
    assert "'ssl.key.password': None" in broker_configs  # described, as null
    assert "'listener.name.ssl.ssl.key.password': None" in broker_configs  # listed as Kafka lists it
    assert "'listener.name.sasl_ssl.plain.sasl.jaas.config': None" in broker_configs
    with urllib.request.urlopen(broker["metrics"], timeout=10) as response:
        broker_metrics = response.read().decode()
    everything = "\n".join([caplog.text, *exposed, *failures, broker_metrics, broker_configs,
                            *(done.stdout + done.stderr for done in cli),
                            broker["log"].read_text(), json.dumps([r.getMessage() for r in caplog.records])])
    assert "DEBUG" in caplog.text and "DEBUG" in broker["log"].read_text()  # every level was on
    leaked = [secret for secret in secrets(pki) if secret in everything]
    assert not leaked, f"{len(leaked)} secret(s) shown, e.g. {leaked[0][:6]}..."

