"""librdkafka's own security tests (0097 ssl_verify, 0126 oauthbearer_oidc, 0135 sasl_credentials,
0142 reauthentication) against a secured broker, as librdkafka's CI runs them against a trivup cluster:
the same test-runner, a test.conf naming the listener and credentials, and the environment variables
trivup would set (the SSL_* key files of 0097, the *_OIDC_URL token endpoints of 0126).

The test-runner comes from librdkafka's source as npm's node-rdkafka package ships it: ``make librdkafka``
builds it and links it at ``.cache/librdkafka``. Used by tests/security/test_librdkafka_suite.py (strom
broker, in CI) and tests/security/run_librdkafka_tests.py (by hand, on strom broker or Apache Kafka).

Each test runs with its own test.conf (SASL_SSL with SCRAM-SHA-512, SSL with a client certificate, or
SASL_SSL with OAUTHBEARER tokens fetched from a throwaway identity provider). Subtests that create topics
with replication factor 3 do not fit a single node (Apache Kafka refuses them too): ``Run.subtests``
names those that fit, one test-runner a name (librdkafka's ``SUBTESTS``, a substring match).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from security.conftest import PASSWORDS, oauth_listener, start_secured
from support.apache_kafka import ROOT, KafkaCluster, KafkaSecurity
from support.certificates import Pki
from support.identity_provider import AUDIENCE, ISSUER, IdentityProvider

LIBRDKAFKA = ROOT / ".cache" / "librdkafka"  # `make librdkafka` links the built tree here
CLIENT_KEY_PASSWORD = "client-key-pw-4Rt"
PKCS8 = serialization.PrivateFormat.PKCS8
# 0142 runs only when the broker sets it; each of its subtests produces for 1.2 times it
REAUTH, REAUTH_MS = "connections.max.reauth.ms", "3000"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUBTEST_STARTED = re.compile(r"\[ ([^\[\]]+?) \]$", re.MULTILINE)  # SUB_TEST's and 0097's case headers
NOT_A_START = re.compile(r": (PASS \(|SKIP: )|^PASSED: ")  # the same brackets tell passes and skips
SUBTEST_PASSED = re.compile(r"\[ ([^\[\]]+?): PASS \(|\[ PASSED: ([^\[\]]+?) \]")  # SUB_TEST, 0097's cases
SUBTEST_SKIPPED = re.compile(r"\[ ([^\[\]]+?): SKIP: ")
SUMMARY_ROW = re.compile(r"^\| (\d{4}_\w+) +\| +(PASSED|FAILED|SKIPPED) +\|", re.MULTILINE)
FAILURE = re.compile(r'^### Test "([^"]+)" failed at [^\n]*###\n([^\n]*)', re.MULTILINE)


class LibrdkafkaSetupError(RuntimeError):
    """librdkafka's test-runner is not built here; the message says what to do."""


@dataclass(frozen=True)
class Listeners:
    """Where the tests connect: SASL_SSL with SCRAM, mutual TLS, SASL_SSL with signed OAUTHBEARER tokens."""

    scram: str
    mtls: str
    oauth: str


@dataclass(frozen=True)
class Run:
    test: str
    conf: dict[str, str]
    env: dict[str, str]
    subtests: tuple[str, ...] = ()  # librdkafka's SUBTESTS (one substring a run): those that fit one node


@dataclass(frozen=True)
class Outcome:
    """What one test-runner reported: its verdict on the test (PASSED, FAILED, SKIPPED) read from its
    summary table, or FAILED when it printed none (it aborts on a failure), and the subtests it names."""

    test: str
    subtests: str  # the SUBTESTS filter, "" for all
    verdict: str
    started: tuple[str, ...]  # in order, each case or subtest the runner began
    passed: tuple[str, ...]
    skipped: tuple[str, ...]
    failures: tuple[str, ...]  # each failed test's first message line
    seconds: float
    log: Path

    def tail(self, lines: int = 12) -> str:
        return "\n".join(ANSI.sub("", self.log.read_text()).splitlines()[-lines:])


def runner_path(librdkafka: Path = LIBRDKAFKA) -> Path:
    runner = librdkafka / "tests" / "test-runner"
    if not runner.is_file():
        raise LibrdkafkaSetupError(f"librdkafka's test-runner is not built in {librdkafka}: run `make "
                                   "librdkafka` (npm fetches its source; a C and C++ compiler builds it)")
    return runner


def ssl_files(pki: Pki, directory: Path) -> dict[str, str]:
    """The client key, certificate and CA in each encoding 0097 reads (trivup's SSL_* variables)."""
    key = serialization.load_pem_private_key(pki.client_key.read_bytes(), None)
    cert = x509.load_pem_x509_certificate(pki.client_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    encrypted = serialization.BestAvailableEncryption(CLIENT_KEY_PASSWORD.encode())
    files = {
        "SSL_priv_pem": key.private_bytes(serialization.Encoding.PEM, PKCS8, encrypted),
        "SSL_priv_der": key.private_bytes(serialization.Encoding.DER, PKCS8, encrypted),
        "SSL_pub_pem": cert.public_bytes(serialization.Encoding.PEM),
        "SSL_pub_der": cert.public_bytes(serialization.Encoding.DER),
        "SSL_ca_pem": ca.public_bytes(serialization.Encoding.PEM),
        "SSL_all_cas_pem": pki.ca.read_bytes() + pki.other_ca.read_bytes(),
        "SSL_ca_der": ca.public_bytes(serialization.Encoding.DER),
        "SSL_pkcs": pkcs12.serialize_key_and_certificates(b"client", key, cert, [ca], encrypted),
    }
    directory.mkdir(parents=True, exist_ok=True)
    env = {}
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        env[name] = str(path)
    return {**env, "SSL_password": CLIENT_KEY_PASSWORD}


def runs(at: Listeners, pki: Pki, idp: IdentityProvider, ssl_env: dict[str, str]) -> list[Run]:
    scram = {"bootstrap.servers": at.scram, "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca),
             "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "admin",  # the Kafka node's super user
             "sasl.password": PASSWORDS["admin"]}
    mtls = {"bootstrap.servers": at.mtls, "security.protocol": "SSL",
            "ssl.key.location": ssl_env["SSL_priv_pem"], "ssl.key.password": CLIENT_KEY_PASSWORD,
            "ssl.certificate.location": ssl_env["SSL_pub_pem"], "ssl.ca.location": str(pki.ca)}
    oidc = {"bootstrap.servers": at.oauth, "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca),
            "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": "alice", "sasl.oauthbearer.client.secret": "alice-secret",
            "sasl.oauthbearer.token.endpoint.url": idp.token_url}
    oidc_env = {"VALID_OIDC_URL": idp.token_url, "EXPIRED_TOKEN_OIDC_URL": idp.token_url + "/expired",
                "INVALID_OIDC_URL": idp.token_url + "/invalid"}
    return [
        Run("0097", mtls, ssl_env),
        Run("0135", scram, {}),
        Run("0142", scram, {}, subtests=(  # its consumer subtest creates an RF 3 topic
            "producer message loss", "in the middle of a txn", "reauth failure")),
        Run("0142", oidc, {}, subtests=("reauthentication with oauthbearer",)),  # its OAUTHBEARER subtests
        # its produce/consume subtests create RF 3 topics; "failing with" leaves out the failures of
        # Azure IMDS settings too, which the client finds before it reaches a broker
        Run("0126", oidc, oidc_env, subtests=("failing with",)),
    ]


def run_all(specs: Iterable[Run], work: Path, timeout_s: float,
            librdkafka: Path = LIBRDKAFKA) -> dict[str, list[Outcome]]:
    """Each test's outcomes, by its number. The runs go side by side (as librdkafka's test-runner runs
    its tests: they mostly wait, on timers and re-authentications), each one's SUBTESTS filters in turn."""
    specs = list(specs)
    with ThreadPoolExecutor(len(specs)) as pool:
        futures = [(spec.test, pool.submit(run, spec, work, timeout_s, librdkafka)) for spec in specs]
    outcomes: dict[str, list[Outcome]] = {}
    for test, future in futures:
        outcomes.setdefault(test, []).extend(future.result())
    return outcomes


def run(spec: Run, work: Path, timeout_s: float, librdkafka: Path = LIBRDKAFKA) -> list[Outcome]:
    """The test's outcomes, one test-runner a SUBTESTS filter."""
    return [run_once(spec, subtests, work, timeout_s, librdkafka) for subtests in spec.subtests or ("",)]


def run_once(spec: Run, subtests: str, work: Path, timeout_s: float, librdkafka: Path) -> Outcome:
    runner = runner_path(librdkafka)
    name = f"test-{spec.test}-{spec.conf['security.protocol']}-{spec.conf.get('sasl.mechanisms', 'TLS')}" \
           f"{'-' + subtests.replace(' ', '_') if subtests else ''}"
    conf = work / f"{name}.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in spec.conf.items()))
    env = {**os.environ, **spec.env, "TESTS": spec.test, "RDKAFKA_TEST_CONF": str(conf),
           "TEST_KAFKA_VERSION": "4.1.0", "LD_LIBRARY_PATH": f"{librdkafka / 'src'}:{librdkafka / 'src-cpp'}"}
    if subtests:
        env["SUBTESTS"] = subtests
    started = time.monotonic()
    try:
        done = subprocess.run([str(runner), "-E"], cwd=runner.parent, env=env, capture_output=True,
                              text=True, timeout=timeout_s)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        captured = b"".join(part or b"" for part in (exc.stdout, exc.stderr))  # bytes, text=True or not
        output, code = f"{captured.decode(errors='replace')}\nTIMED OUT after {timeout_s:.0f} s", -1
    took = time.monotonic() - started
    log = work / f"{name}.log"
    log.write_text(output)
    return outcome(spec.test, subtests, ANSI.sub("", output), code, took, log)


def outcome(test: str, subtests: str, output: str, code: int, seconds: float, log: Path) -> Outcome:
    """The runner's verdict: PASSED only if it exited 0 and its summary passes every test it ran of
    ``test`` (0097 is two: 0097_ssl_verify, 0097_ssl_verify_local); SKIPPED if it skipped them all."""
    rows = [verdict for name, verdict in SUMMARY_ROW.findall(output) if name.startswith(f"{test}_")]
    verdict = ("FAILED" if code != 0 or not rows or "FAILED" in rows
               else "SKIPPED" if set(rows) == {"SKIPPED"} else "PASSED")
    started = (name for name in SUBTEST_STARTED.findall(output) if not NOT_A_START.search(name))
    return Outcome(test, subtests, verdict, started=tuple(" ".join(name.split()) for name in started),
                   passed=tuple(" ".join((a or b).split()) for a, b in SUBTEST_PASSED.findall(output)),
                   skipped=tuple(" ".join(s.split()) for s in SUBTEST_SKIPPED.findall(output)),
                   failures=tuple(f"{name}: {why}" for name, why in FAILURE.findall(output)),
                   seconds=seconds, log=log)


def strom_broker(stack: ExitStack, work: Path, pki: Pki, idp: IdentityProvider) -> Listeners:
    """The secured strom broker, its OAUTH listener judging OAUTHBEARER tokens by the JWKS (the keys
    Apache Kafka's OAUTH listener takes)."""
    keys = KafkaSecurity(pki, jwks_url=idp.jwks_url, jwks_audience=AUDIENCE, jwks_issuer=ISSUER)
    broker = start_secured(work / "broker", pki,
                           **{REAUTH: REAUTH_MS, **oauth_listener(keys.oauth_listener())})
    stack.callback(broker.stop)
    return Listeners(broker.listeners["SASL_SSL"], broker.listeners["SSL"], broker.listeners["OAUTH"])


def apache_kafka(stack: ExitStack, work: Path, pki: Pki, idp: IdentityProvider) -> Listeners:
    """A secured Apache Kafka node whose authorizer lets anyone do what no ACL names, as strom broker
    without one does (0142 reads broker configs as alice, its OAUTHBEARER tokens' subject)."""
    security = KafkaSecurity(pki, PASSWORDS, jwks_url=idp.jwks_url, jwks_audience=AUDIENCE,
                             jwks_issuer=ISSUER)
    config = {REAUTH: REAUTH_MS, "allow.everyone.if.no.acl.found": "true"}
    kafka = stack.enter_context(KafkaCluster(work / "kafka", brokers=1, config=config, security=security))
    return Listeners(kafka.bootstrap_servers, kafka.ssl_bootstrap_servers, kafka.oauth_bootstrap_servers)
