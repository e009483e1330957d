"""librdkafka's own security tests (0097 ssl_verify, 0126 oauthbearer_oidc, 0135 sasl_credentials,
0142 reauthentication) against a secured strom broker, as librdkafka's CI runs them against a trivup
cluster: the same test-runner, a test.conf naming the listener and credentials, and the environment
variables trivup would set (the SSL_* key files of 0097, the *_OIDC_URL token endpoints of 0126).

It needs a librdkafka source tree with its test-runner built (docs/security.md says how; v2.14.0 is the
last release whose tests need no share groups, KIP-932, which strom broker does not serve):

    .venv/bin/python tests/security/run_librdkafka_tests.py --librdkafka .cache/librdkafka
    .venv/bin/python tests/security/run_librdkafka_tests.py --librdkafka .cache/librdkafka --apache-kafka

(the second runs the same against a secured single-node Apache Kafka from tests/support/apache_kafka.py:
the baseline a strom broker result is judged by).

Each test runs in its own test.conf (SASL_SSL with SCRAM-SHA-512, SSL with a client certificate, or
SASL_SSL with OAUTHBEARER tokens fetched from a throwaway identity provider); the last lines say which
passed. Subtests that create topics with replication factor 3 do not fit a single node (Apache Kafka
refuses them too): ``SUBTESTS`` leaves them out (``Run.subtests``). docs/security.md has the results.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]  # tests/ (support, security) as pytest sees it

from security.conftest import PASSWORDS, oauth_listener, start_secured  # noqa: E402
from support.apache_kafka import KafkaCluster, KafkaSecurity  # noqa: E402
from support.certificates import Pki, make_pki  # noqa: E402
from support.identity_provider import AUDIENCE, ISSUER, IdentityProvider  # noqa: E402

CLIENT_KEY_PASSWORD = "client-key-pw-4Rt"
PKCS8 = serialization.PrivateFormat.PKCS8
REAUTH, REAUTH_MS = "connections.max.reauth.ms", "10000"  # 0142 runs only when the broker sets it


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
        Run("0126", oidc, oidc_env, subtests=("fail",)),  # its produce/consume subtests create RF 3 topics
    ]


def run(librdkafka: Path, spec: Run, work: Path, timeout_s: float) -> tuple[str, float, str]:
    """The test's verdict (PASSED, FAILED, SKIPPED), its seconds and its output's last lines (a run of
    each of its subtests: FAILED if one failed)."""
    verdicts = [run_once(librdkafka, spec, subtests, work, timeout_s) for subtests in spec.subtests or ("",)]
    verdict = min((v for v, _, _ in verdicts), key=["FAILED", "PASSED", "SKIPPED"].index)
    return verdict, sum(took for _, took, _ in verdicts), "\n".join(tail for _, _, tail in verdicts)


def run_once(librdkafka: Path, spec: Run, subtests: str, work: Path,
             timeout_s: float) -> tuple[str, float, str]:
    conf = work / f"test-{spec.test}.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in spec.conf.items()))
    tests = librdkafka / "tests"
    env = {**os.environ, **spec.env, "TESTS": spec.test, "RDKAFKA_TEST_CONF": str(conf),
           "TEST_KAFKA_VERSION": "4.1.0", "LD_LIBRARY_PATH": f"{librdkafka / 'src'}:{librdkafka / 'src-cpp'}"}
    if subtests:
        env["SUBTESTS"] = subtests
    started = time.monotonic()
    try:
        done = subprocess.run(["./test-runner", "-E"], cwd=tests, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}\nTIMED OUT after {timeout_s:.0f} s", -1
    took = time.monotonic() - started
    verdict = ("SKIPPED" if "SKIPPED" in output and code == 0 and "PASSED" not in output.split("SKIPPED")[-1]
               else "PASSED" if code == 0 else "FAILED")
    (work / f"test-{spec.test}{'-' + subtests.replace(' ', '_') if subtests else ''}.log").write_text(output)
    return verdict, took, "\n".join(output.splitlines()[-12:])


def strom_broker(stack: ExitStack, work: Path, pki: Pki, idp: IdentityProvider) -> Listeners:
    """The secured strom broker, its OAUTH listener judging OAUTHBEARER tokens by the JWKS (the keys
    Apache Kafka's OAUTH listener takes)."""
    keys = KafkaSecurity(pki, jwks_url=idp.jwks_url, jwks_audience=AUDIENCE, jwks_issuer=ISSUER)
    broker = start_secured(work / "broker", pki,
                           **{REAUTH: REAUTH_MS, **oauth_listener(keys.oauth_listener())})
    stack.callback(broker.stop)
    return Listeners(broker.listeners["SASL_SSL"], broker.listeners["SSL"], broker.listeners["OAUTH"])


def apache_kafka(stack: ExitStack, work: Path, pki: Pki, idp: IdentityProvider) -> Listeners:
    security = KafkaSecurity(pki, PASSWORDS, jwks_url=idp.jwks_url, jwks_audience=AUDIENCE,
                             jwks_issuer=ISSUER)
    kafka = stack.enter_context(KafkaCluster(work / "kafka", brokers=1, config={REAUTH: REAUTH_MS},
                                             security=security))
    return Listeners(kafka.bootstrap_servers, kafka.ssl_bootstrap_servers, kafka.oauth_bootstrap_servers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--librdkafka", type=Path, required=True, help="its tree, tests/test-runner built")
    parser.add_argument("--tests", default="0097,0126,0135,0142")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--keep", type=Path, help="write the test.conf files and logs here")
    parser.add_argument("--apache-kafka", action="store_true", help="run on secured Apache Kafka instead")
    args = parser.parse_args()
    librdkafka = args.librdkafka.resolve()
    work = args.keep or Path(tempfile.mkdtemp(prefix="strom-librdkafka-"))
    work.mkdir(parents=True, exist_ok=True)
    pki = make_pki(work / "pki")
    results = []
    with IdentityProvider() as idp, ExitStack() as stack:
        at = (apache_kafka if args.apache_kafka else strom_broker)(stack, work, pki, idp)
        for spec in runs(at, pki, idp, ssl_files(pki, work)):
            if spec.test not in args.tests.split(","):
                continue
            verdict, took, tail = run(librdkafka, spec, work, args.timeout)
            print(f"--- {spec.test}: {verdict} in {took:.0f} s\n{tail}\n", flush=True)
            results.append((spec.test, verdict, took))
    print(f"logs in {work}")
    for test, verdict, took in results:
        print(f"{test} {verdict} {took:.0f} s")
    return 0 if all(verdict != "FAILED" for _, verdict, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
