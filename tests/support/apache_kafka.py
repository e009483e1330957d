"""Apache Kafka itself as a test component: a KRaft cluster of N nodes on loopback, run from Kafka's own jars.

The jars come from Maven Central through ``tests/support/maven/apache-kafka/pom.xml`` (``make kafka``
copies them into ``.cache/apache-kafka/<version>/libs``); no Docker, no tarball. Each node is one JVM in
the combined broker+controller role, with its own directory (``node-<i>/data``, ``node-<i>/logs``) and a
log4j2 configuration that writes Kafka's log there, not to the terminal.

    from support.apache_kafka import KafkaCluster   # tests/ is on sys.path under pytest

    with KafkaCluster(tmp_path, brokers=3) as cluster:
        cluster.bootstrap_servers               # "127.0.0.1:p0,127.0.0.1:p1,127.0.0.1:p2"
        cluster.kill(1)                         # SIGKILL node 1 (a crash); start_node(1) brings it back
        cluster.restart(1)                      # a clean stop and start, as a rolling restart does
        cluster.leader_of("topic", 0)           # node id leading a partition
        cluster.transaction_coordinator("app-0_1")  # node id coordinating a transactional.id
        cluster.group_coordinator("app")        # node id coordinating a consumer group

Secured on request (``security=KafkaSecurity(pki, users)``): clients connect to a SASL_SSL listener with
SCRAM-SHA-512 (``bootstrap_servers``; the users' credentials are created when the storage is formatted)
or to a mutual-TLS listener (``ssl_bootstrap_servers``), and StandardAuthorizer enforces ACLs with
``allow.everyone.if.no.acl.found=false``. The super users are the set-up's ``admin`` (whose settings
are ``admin_settings``) and the nodes themselves (their certificate, on the inter-broker and controller
listeners). With ``KafkaSecurity(..., jwks_url=...)`` a third listener (``oauth_bootstrap_servers``,
SASL_SSL) takes OAUTHBEARER tokens signed by a key of that JWKS (Kafka's
OAuthBearerValidatorCallbackHandler, with ``jwks_audience`` and ``jwks_issuer`` expected).

    KafkaCluster(tmp_path, brokers=3, hosts=[h0, h1, h2])   # node i on host i (tests/support/hosts.py):
                                                # in its namespace, on its address, ports 9092 and 9093

As a script it serves until SIGTERM or SIGINT, printing ``bootstrap.servers=...`` as its first line:

    .venv/bin/python tests/support/apache_kafka.py --brokers 3 --dir /tmp/kafka
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from strom.kafka import clients

try:
    from support.processes import free_port
except ModuleNotFoundError:  # run as a script: its own directory is on the path, not tests/
    from processes import free_port

if TYPE_CHECKING:
    from support.hosts import Host

ROOT = Path(__file__).resolve().parents[2]
POM = Path(__file__).resolve().parent / "maven" / "apache-kafka" / "pom.xml"
KAFKA_VERSION = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text()).group(1)
LIBS = ROOT / ".cache" / "apache-kafka" / KAFKA_VERSION / "libs"
# Kafka's own defaults for these internal topics; the coordinator of a key is the leader of partition
# abs(key.hashCode()) % count of its topic.
OFFSETS_TOPIC_PARTITIONS = 50
TRANSACTION_TOPIC_PARTITIONS = 50
FIRST_JIT_TIER = "-XX:TieredStopAtLevel=1"
"""Kafka is a test component here: C1 alone starts 3 nodes on 2 idle cores in 17 s instead of 27 s, and
its compilations take less CPU from the Spark and Python processes under test."""
_START_TIMEOUT_S = 300.0  # a loaded 2-core host took up to 216 s to start 3 nodes

_LOG4J2 = """\
Configuration:
  status: warn
  Appenders:
    RollingFile:
      name: server
      fileName: "${sys:kafka.logs.dir}/server.log"
      filePattern: "${sys:kafka.logs.dir}/server.log.%i"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
      SizeBasedTriggeringPolicy:
        size: 50MB
      DefaultRolloverStrategy:
        max: 2
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        ref: server
    Logger:
      - name: kafka.request.logger
        level: WARN
      - name: org.apache.kafka.controller
        level: INFO
      - name: state.change.logger
        level: WARN
"""


@dataclass(frozen=True)
class KafkaSecurity:
    """A secured cluster's PKI (``support.certificates.Pki``) and SCRAM users (name -> password; ``admin``
    is the set-up's super user)."""

    pki: object
    users: Mapping[str, str] = field(default_factory=dict)
    admin: str = "admin"
    node_principal: str = "User:CN=localhost,O=strom"  # the subject of the PKI's broker certificate
    jwks_url: str = ""
    jwks_audience: str = ""
    jwks_issuer: str = ""
    listener_keys: Mapping[str, str] = field(default_factory=dict)
    """Per-listener keys (``listener.name.<listener>.*``) over the ones below: a fidelity test gives strom
    broker the same."""

    def sasl_settings(self, user: str) -> dict[str, str]:
        """librdkafka settings of ``user`` on the SASL_SSL listener."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": self.users[user], "ssl.ca.location": str(self.pki.ca)}

    def node_properties(self) -> dict[str, str]:
        jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "SSL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.pki.broker),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.pki.ca),
            "ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER",  # OAUTHBEARER: Kafka's unsecured JWS
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{self.admin};{self.node_principal}",
            **self._signed_token_listener(),
            **self.listener_keys,
        }

    def oauth_listener(self) -> dict[str, str]:
        """The OAUTH listener's own keys, in Kafka's per-listener form (which strom broker takes too): only
        OAUTHBEARER, its tokens signed by a key of the JWKS, with the expected audience and issuer."""
        prefix = "listener.name.oauth."
        return {
            prefix + "sasl.enabled.mechanisms": "OAUTHBEARER",
            prefix + "oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            prefix + "oauthbearer.sasl.oauthbearer.jwks.endpoint.url": self.jwks_url,
            prefix + "oauthbearer.sasl.oauthbearer.expected.audience": self.jwks_audience,
            prefix + "oauthbearer.sasl.oauthbearer.expected.issuer": self.jwks_issuer,
        }

    def _signed_token_listener(self) -> dict[str, str]:
        if not self.jwks_url:
            return {}
        return {
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:SSL,OAUTH:SASL_SSL",
            **self.oauth_listener(),
            "listener.name.oauth.oauthbearer.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            # Kafka 4.1's default (DefaultJwtValidator) checks no signature on a broker: name the broker's
            "sasl.oauthbearer.jwt.validator.class":
                "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator",
        }

    def java_options(self) -> list[str]:
        """Kafka 4 fetches a JWKS only from the URLs this system property allows."""
        return [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.jwks_url}"] if self.jwks_url else []


class KafkaSetupError(RuntimeError):
    """Apache Kafka cannot run here (no Java, jars not fetched); the message says what to do."""


def java_hashcode(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units, as a signed 32-bit int)."""
    value = 0
    data = text.encode("utf-16-be")
    for index in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[index:index + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(key: str, partitions: int) -> int:
    """The internal-topic partition Kafka maps a group id or transactional id to (``Utils.abs`` of the
    hash: ``Integer.MIN_VALUE`` counts as 0)."""
    code = java_hashcode(key)
    return (0 if code == -(1 << 31) else abs(code)) % partitions


def java_command() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaSetupError("Apache Kafka needs Java 17+: install it (apt-get install "
                              "openjdk-17-jre-headless) or set JAVA_HOME")
    return str(java)


def class_path() -> str:
    if not LIBS.is_dir() or not any(LIBS.glob("kafka_2.13-*.jar")):
        raise KafkaSetupError(f"Apache Kafka {KAFKA_VERSION}'s jars are not in {LIBS}: run `make kafka` "
                              "(Maven copies them from Maven Central)")
    return os.pathsep.join(str(jar) for jar in sorted(LIBS.glob("*.jar")))


class KafkaCluster:
    """N combined broker+controller KRaft nodes on 127.0.0.1; use as a context manager."""

    def __init__(self, base_dir: Path, brokers: int = 3, config: Mapping[str, object] | None = None,
                 heap: str = "512m", stop_timeout_s: float = 20.0,
                 security: KafkaSecurity | None = None, hosts: Sequence[Host] = (),
                 java_options: Sequence[str] = ()) -> None:
        self.security = security
        self.java_options = [*java_options, *(security.java_options() if security else ())]
        self.tls_ports = [free_port() for _ in range(brokers)] if security else []
        self.oauth_ports = [free_port() for _ in range(brokers)] if security and security.jwks_url else []
        self.base_dir = Path(base_dir)
        self.hosts = list(hosts)
        self.addresses = [host.address for host in hosts] or ["127.0.0.1"] * brokers
        self.brokers = brokers
        self.heap = heap
        self.stop_timeout_s = stop_timeout_s
        self.cluster_id = uuid.uuid4().hex[:22]
        self.ports = [9092] * brokers if hosts else [free_port() for _ in range(brokers)]
        self.controller_ports = [9093] * brokers if hosts else [free_port() for _ in range(brokers)]
        replicas = min(3, brokers)
        in_sync = min(2, brokers)
        self.config: dict[str, str] = {
            "default.replication.factor": str(replicas),
            "min.insync.replicas": str(in_sync),
            "offsets.topic.replication.factor": str(replicas),
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(in_sync),
            "num.partitions": "1",
            **{key: str(value) for key, value in (config or {}).items()},
        }
        self._nodes: dict[int, subprocess.Popen] = {}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{address}:{port}" for address, port in zip(self.addresses, self.ports, strict=True))

    @property
    def ssl_bootstrap_servers(self) -> str:
        """The mutual-TLS listeners of a secured cluster."""
        return ",".join(f"127.0.0.1:{port}" for port in self.tls_ports)

    @property
    def oauth_bootstrap_servers(self) -> str:
        """The signed-token OAUTHBEARER listeners of a secured cluster with a JWKS."""
        return ",".join(f"127.0.0.1:{port}" for port in self.oauth_ports)

    @property
    def admin_settings(self) -> dict[str, str]:
        """Client settings of the set-up's super user (none on an open cluster)."""
        return self.security.sasl_settings(self.security.admin) if self.security else {}

    def node_dir(self, node: int) -> Path:
        return self.base_dir / f"node-{node}"

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def start(self) -> KafkaCluster:
        java_command()
        class_path()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(self.brokers) as pool:  # one JVM each: side by side
            list(pool.map(self._format, range(self.brokers)))
        try:
            for node in range(self.brokers):
                self._spawn(node)
            self.wait_until_serving(self.brokers)
            self._create_internal_topics()
        except BaseException:
            self.stop()
            raise
        return self

    def _properties(self, node: int) -> Path:
        voters = ",".join(f"{i}@{self.addresses[i]}:{port}" for i, port in enumerate(self.controller_ports))
        address = self.addresses[node]
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(node),
            "listeners": f"PLAINTEXT://{address}:{self.ports[node]},CONTROLLER://{address}:"
                         f"{self.controller_ports[node]}",
            "advertised.listeners": f"PLAINTEXT://{address}:{self.ports[node]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": voters,
            "log.dirs": str(self.node_dir(node) / "data"),
            **self._secured_listeners(node),
            **self.config,
        }
        path = self.node_dir(node) / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        (self.node_dir(node) / "log4j2.yaml").write_text(_LOG4J2)
        return path

    def _secured_listeners(self, node: int) -> dict[str, str]:
        """The listeners and security settings of a secured node (none for an open cluster)."""
        if self.security is None:
            return {}
        address = self.addresses[node]
        clients_at = f"SASL_SSL://{address}:{self.ports[node]},SSL://{address}:{self.tls_ports[node]}"
        if self.oauth_ports:
            clients_at += f",OAUTH://{address}:{self.oauth_ports[node]}"
        return {"listeners": f"{clients_at},CONTROLLER://{address}:{self.controller_ports[node]}",
                "advertised.listeners": clients_at, **self.security.node_properties()}

    def _jvm(self, node: int, main_class: str, *args: str) -> list[str]:
        logs = self.node_dir(node) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        return [java_command(), f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20", FIRST_JIT_TIER, *self.java_options, "-Djava.awt.headless=true",
                f"-Dkafka.logs.dir={logs}",
                f"-Dlog4j2.configurationFile={self.node_dir(node) / 'log4j2.yaml'}",
                "-cp", class_path(), main_class, *args]

    def _format(self, node: int) -> None:
        properties = self._properties(node)
        result = subprocess.run(
            self._jvm(node, "kafka.tools.StorageTool", "format", "--cluster-id", self.cluster_id,
                      "--config", str(properties), "--ignore-formatted", *self._scram_users()),
            capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise KafkaSetupError(f"formatting node {node}'s storage failed:\n{result.stdout}{result.stderr}")

    def _scram_users(self) -> list[str]:
        """``--add-scram`` arguments creating the secured cluster's users with its storage."""
        users = self.security.users if self.security else {}
        return [arg for name, password in users.items()
                for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")]

    def _spawn(self, node: int) -> None:
        properties = self._properties(node)
        command = self._jvm(node, "kafka.Kafka", str(properties))
        with open(self.node_dir(node) / "stdout.log", "ab") as output:
            self._nodes[node] = subprocess.Popen(self.hosts[node].command(command) if self.hosts else command,
                                                 stdout=output, stderr=subprocess.STDOUT,
                                                 start_new_session=True)

    def admin(self) -> AdminClient:
        return clients.admin(self.bootstrap_servers, **{"socket.timeout.ms": 5000, **self.admin_settings})

    def _listening(self) -> bool:
        for node in self._nodes:
            with socket.socket() as probe:
                if probe.connect_ex((self.addresses[node], self.ports[node])) != 0:
                    return False
        return True

    def alive(self) -> list[int]:
        """Node ids whose process runs (whether or not the cluster counts them in yet)."""
        return sorted(node for node, process in self._nodes.items() if process.poll() is None)

    def wait_until_serving(self, brokers: int, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Until the cluster's metadata lists ``brokers`` brokers and the controller has a leader."""
        deadline = time.monotonic() + timeout_s
        admin = None
        while True:
            for node, process in self._nodes.items():
                if process.poll() is not None:
                    raise KafkaSetupError(f"Kafka node {node} exited with {process.returncode}:\n"
                                          f"{self.log(node)}")
            if admin is None and self._listening():
                admin = self.admin()
            if admin is not None:
                with contextlib.suppress(KafkaException):
                    metadata = admin.list_topics(timeout=5)
                    if len(metadata.brokers) >= brokers and metadata.controller_id >= 0:
                        return
            if time.monotonic() > deadline:
                raise KafkaSetupError(f"Kafka did not serve {brokers} brokers within {timeout_s:.0f} s:\n"
                                      f"{self.log(0)}")
            time.sleep(0.3)

    def _create_internal_topics(self, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Has the cluster create and load ``__consumer_offsets`` and ``__transaction_state`` (50
        partitions each unless configured), as a cluster in service has them: otherwise the first group
        or transaction of a test waits for that, often longer than a client's request timeout on a busy
        machine."""
        deadline = time.monotonic() + timeout_s
        warm = "strom-test-warm-up"
        clients.create_topics(self.bootstrap_servers, {warm: 1}, settings=self.admin_settings)
        producer = clients.producer(self.bootstrap_servers,
                                    **{"transactional.id": warm, **self.admin_settings})
        pool = ThreadPoolExecutor(1)
        initialised = pool.submit(producer.init_transactions, timeout_s)  # made while the group joins
        try:
            self._join(warm, deadline, timeout_s)
            initialised.result()
        finally:
            pool.shutdown(wait=False)  # a failed join does not wait for the transactions' timeout

    def _join(self, group: str, deadline: float, timeout_s: float) -> None:
        """A consumer of ``group`` subscribes to the topic of that name and waits for its assignment."""
        consumer = clients.consumer(self.bootstrap_servers, group, **self.admin_settings)
        try:
            consumer.subscribe([group])
            while not consumer.assignment():
                consumer.poll(0.2)
                if time.monotonic() > deadline:
                    raise KafkaSetupError(f"no group coordinator within {timeout_s:.0f} s:\n{self.log(0)}")
        finally:
            consumer.close()

    def log(self, node: int, lines: int = 40) -> str:
        """The last lines of node ``node``'s server.log and stdout."""
        texts = []
        for path in (self.node_dir(node) / "logs" / "server.log", self.node_dir(node) / "stdout.log"):
            if path.exists():
                texts.append("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(texts)

    def pid(self, node: int) -> int:
        """The process id of node ``node``'s JVM (a benchmark reads its CPU time)."""
        return self._nodes[node].pid

    def kill(self, node: int, sig: int = signal.SIGKILL) -> None:
        """Ends node ``node`` abruptly (SIGKILL: a machine failure) and waits for its process to exit."""
        process = self._nodes.pop(node)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        process.wait(timeout=self.stop_timeout_s)

    def stop_node(self, node: int) -> None:
        """A clean shutdown of node ``node`` (SIGTERM: leadership moves away, logs are flushed)."""
        process = self._nodes.pop(node)
        _stop(process, self.stop_timeout_s)

    def start_node(self, node: int, wait: bool = True) -> None:
        """Starts node ``node`` again on its ports and data (after ``kill`` or ``stop_node``)."""
        self._spawn(node)
        if wait:
            self.wait_until_serving(len(self._nodes))

    def restart(self, node: int) -> None:
        self.stop_node(node)
        self.start_node(node)

    def leader_of(self, topic: str, partition: int) -> int:
        metadata = self.admin().list_topics(topic, timeout=10)
        return metadata.topics[topic].partitions[partition].leader

    def group_coordinator(self, group: str) -> int:
        partitions = int(self.config.get("offsets.topic.num.partitions", OFFSETS_TOPIC_PARTITIONS))
        return self.leader_of("__consumer_offsets", coordinator_partition(group, partitions))

    def transaction_coordinator(self, transactional_id: str) -> int:
        partitions = int(self.config.get("transaction.state.log.num.partitions",
                                         TRANSACTION_TOPIC_PARTITIONS))
        return self.leader_of("__transaction_state", coordinator_partition(transactional_id, partitions))

    def stop(self) -> None:
        """Ends every node at once (SIGKILL): nothing outlives the cluster, so no node spends 6-7 s in a
        clean shutdown (``stop_node`` is that)."""
        for node in list(self._nodes):
            self.kill(node)


def _stop(process: subprocess.Popen, timeout_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Runs an Apache Kafka KRaft cluster on loopback until "
                                                 "SIGTERM or SIGINT.")
    parser.add_argument("--brokers", type=int, default=3, help="nodes (combined broker+controller)")
    parser.add_argument("--dir", type=Path, required=True, help="where the nodes keep data and logs")
    parser.add_argument("-X", dest="config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for every node (repeatable)")
    args = parser.parse_args(argv)
    config = dict(setting.split("=", 1) for setting in args.config)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        cluster = KafkaCluster(args.dir, brokers=args.brokers, config=config).start()
    except KafkaSetupError as error:
        print(error, file=sys.stderr)
        return 1
    try:
        print(f"bootstrap.servers={cluster.bootstrap_servers}", flush=True)
        stopping.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
