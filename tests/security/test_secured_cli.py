"""The CLI against a secured strom broker with the authorizer on, run as a user runs it: a missing
ACL and a refused login end in one error line naming the principal, the resource and the operation
(or what to check), fast, and never show the password."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic, ResourceType

from security.conftest import PASSWORDS, sasl, start_secured
from strom.broker import EmbeddedBroker
from support.processes import STROM
from support.secured_clients import acl, grant

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, pki) -> Iterator[EmbeddedBroker]:
    broker = start_secured(tmp_path_factory.mktemp("cli-guarded"), pki, **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    admin = AdminClient(sasl(broker, pki, user="admin"))
    admin.create_topics([NewTopic("payments", 1)])["payments"].result()
    yield broker
    broker.stop()


def strom(broker: EmbeddedBroker, pki, user: str, password: str, *args: str, ca: Path | None = None,
          stdin: str = "") -> tuple[int, str, float]:
    settings = ["-b", broker.listeners["SASL_SSL"], "-X", "security.protocol=SASL_SSL",
                "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", f"sasl.username={user}",
                "-X", f"sasl.password={password}", "-X", f"ssl.ca.location={ca or pki.ca}"]
    started = time.monotonic()
    done = subprocess.run([STROM, *args, *settings], input=stdin, capture_output=True, text=True, timeout=120)
    assert password not in done.stderr + done.stdout
    return done.returncode, done.stderr.strip(), time.monotonic() - started


def test_a_missing_acl_is_one_line_naming_principal_resource_and_operation(guarded, pki):
    code, err, took = strom(guarded, pki, "bob", PASSWORDS["bob"], "produce", "payments", stdin="a\n")
    assert code == 2 and err.count("\n") == 0 and took < 60
    # the topic is hidden from bob: the operation produce needs is named (Write implies Describe)
    assert err.startswith("error: User:bob may not Write Topic 'payments' (TOPIC_AUTHORIZATION_FAILED)")
    assert "kafka-acls --add --allow-principal User:bob --operation Write --topic payments" in err
    grant(AdminClient(sasl(guarded, pki, user="admin")),
          acl(ResourceType.TOPIC, "payments", "User:bob", AclOperation.DESCRIBE))
    code, err, _ = strom(guarded, pki, "bob", PASSWORDS["bob"], "produce", "payments", stdin="a\n")
    assert code == 2 and err.count("\n") == 0  # librdkafka's own FATAL line is not shown: strom's says it
    assert err.startswith(
        "error: User:bob may not Write Topic 'payments' (CLUSTER_AUTHORIZATION_FAILED)")


def test_a_wrong_password_and_an_untrusted_broker_are_said_at_start(guarded, pki):
    code, err, took = strom(guarded, pki, "bob", "not-bobs-password", "topics", "list")
    assert code == 2 and err.count("\n") == 0 and took < 60
    assert err.startswith("error: Cannot log in to") and "did not accept User:bob with SCRAM-SHA-512" in err
    code, err, _ = strom(guarded, pki, "bob", PASSWORDS["bob"], "topics", "list", ca=pki.other_ca)
    assert code == 2 and "certificate is not signed by a CA the client trusts" in err


def test_consume_names_the_group_acl_it_lacks_describe_without_a_group_read_with_one(guarded, pki):
    admin = AdminClient(sasl(guarded, pki, user="admin"))
    grant(admin, acl(ResourceType.TOPIC, "payments", "User:bob", AclOperation.READ))
    consume = ("consume", "payments", "-o", "beginning", "-e")
    code, err, _ = strom(guarded, pki, "bob", PASSWORDS["bob"], *consume)
    assert code == 2 and err.startswith(  # librdkafka only looks the coordinator up: Describe suffices
        "error: User:bob may not Describe Group 'strom-unused-group' (GROUP_AUTHORIZATION_FAILED)"), err
    grant(admin, acl(ResourceType.GROUP, "strom-unused-group", "User:bob", AclOperation.DESCRIBE))
    assert strom(guarded, pki, "bob", PASSWORDS["bob"], *consume)[0] == 0
    code, err, _ = strom(guarded, pki, "bob", PASSWORDS["bob"], *consume[:2], "-g", "billing", "-e")
    assert code == 2 and err.startswith(
        "error: User:bob may not Read Group 'billing' (GROUP_AUTHORIZATION_FAILED)"), err
