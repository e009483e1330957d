"""The broker: storage, coordinators, background duties and the listener, wired together."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import resource
import signal
import socket
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from strom.broker.config import PER_BROKER, BrokerConfig
from strom.broker.dynamic_configs import FILE_NAME, DynamicConfigs, load_saved
from strom.broker.groups.coordinator import GroupCoordinator
from strom.broker.groups.offsets import OffsetStore
from strom.broker.handlers import load_handlers
from strom.broker.lock import lock_data_dir
from strom.broker.log.manager import InvalidPartitionsError, LogManager, Topic
from strom.broker.metrics import BrokerMetrics
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.security import oauthbearer
from strom.broker.security.acls import Authorizer, Operation, ResourceType
from strom.broker.security.credentials import CredentialStore
from strom.broker.security.listeners import Listener, listener_specs, parse_endpoints
from strom.broker.security.tls import ListenerFileError, ListenerTls, listener_client_auth, server_context
from strom.broker.server import ConnectionHandler, bind
from strom.broker.throttle import LOG_INTERVAL_SECONDS, Throttle
from strom.broker.transactions.service import TransactionService
from strom.errors import BrokerStartError

log = logging.getLogger(__name__)

FLUSH_CHECK_SECONDS = 1.0
IDLE_CHECK_SECONDS = 1.0
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class Broker:
    """A single-node broker serving the Kafka protocol from `data_dir`."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1", port: int = 9092,
                 config: Mapping[str, Any] | None = None, advertised_host: str | None = None,
                 allow_unauthenticated_network: bool = False) -> None:
        """Binds the ports first and then takes the data directory, so a start that cannot listen
        creates nothing; raises BrokerStartError saying what to do. `host` and `port` are the
        listener unless the `listeners` config names them. The listeners start with the configs changed at
        run time and kept in the data directory (a rotated certificate), read before anything is written."""
        self.config = BrokerConfig(config)
        self.data_dir = Path(data_dir).resolve()
        saved_groups = load_saved(self.data_dir, self.config)
        self.listeners = bind_listeners(self.config, host, port, advertised_host, self.data_dir / FILE_NAME)
        try:
            refuse_unauthenticated_network(self.listeners, allow_unauthenticated_network)
            # by listener name; a JWKS is fetched now, before the data directory is touched
            self.oauthbearer = oauthbearer.listener_validators(self.config, self.listeners)
        except BaseException:
            _close(self.listeners)
            raise
        first = self.listeners[0]
        self.host, self.port = first.host, first.port
        self.advertised_host, self.advertised_port = first.advertised_host, first.advertised_port
        self._lock: int | None = None
        try:
            self._lock = lock_data_dir(self.data_dir)
            self.cluster_id = self._cluster_id()
            self._open_storage(saved_groups)
        except BaseException:
            self._release()
            raise

    def _open_storage(self, saved_groups: dict[str, dict[str, int]]) -> None:
        self._auto_create_errors = Throttle(LOG_INTERVAL_SECONDS)
        _raise_open_files_limit()
        self.node_id: int = self.config["node.id"]
        self.closing = False
        load_handlers()
        self.logs = LogManager(self.data_dir, self.config)
        self.dynamic_configs = DynamicConfigs(self.data_dir, self.config, self.logs, saved_groups,
                                              ListenerTls(self.config, self.listeners))
        self.producer_ids = ProducerIdManager(self.data_dir)
        self.offsets = OffsetStore(self.logs)
        self.groups = GroupCoordinator(self.config, self.offsets)
        self.transactions = TransactionService(self.data_dir, self.config, self.logs, self.groups,
                                               self.producer_ids)
        self.metrics = BrokerMetrics()
        self.credentials = CredentialStore(self.data_dir)
        self.authorizer = (Authorizer(self.data_dir, self.config["super.users"],
                                      self.config["allow.everyone.if.no.acl.found"])
                           if self.config["authorizer.class.name"] else None)
        self._denials = Throttle(LOG_INTERVAL_SECONDS)
        self._connections = ConnectionHandler(self)
        self._tasks: list[asyncio.Task] = []

    def _release(self) -> None:
        """Closes the listeners and their token validators and gives up the data directory (at stop and
        after a failed start)."""
        _close(self.listeners)
        for validator in self.oauthbearer.values():
            validator.close()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def _cluster_id(self) -> str:
        path = self.data_dir / "cluster-id"
        if not path.exists():
            path.write_text(uuid.uuid4().hex[:22])
        return path.read_text().strip()

    # ---- topics -------------------------------------------------------------------------------
    def auto_create(self, name: str) -> Topic | None:
        """Creates an unknown topic with num.partitions if auto.create.topics.enable is set (None if
        it is not, or if the open-files limit or the disk cannot take it: that is logged)."""
        if not self.config["auto.create.topics.enable"]:
            return None
        try:
            return self.logs.create_topic(name, -1)
        except (InvalidPartitionsError, OSError) as exc:
            if self._auto_create_errors.ready() is not None:
                log.error("cannot auto-create topic %r: %s", name, exc)
            return None

    def delete_topic(self, name: str) -> None:
        """Deletes a topic's data and the offsets groups committed for it (as Kafka does)."""
        self.logs.delete_topic(name)
        self.offsets.delete_topic(name)

    # ---- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        await self.transactions.start()
        self._connections.start(self.listeners)
        self._every(self.config["offsets.retention.check.interval.ms"] / 1000, self.groups.expire_offsets)
        self._every(FLUSH_CHECK_SECONDS, self.logs.flush_due)
        self._every(IDLE_CHECK_SECONDS, self._connections.close_idle)
        self._every(self.config["log.retention.check.interval.ms"] / 1000, self.logs.apply_retention)
        self._every(self.config["log.cleaner.backoff.ms"] / 1000, self.logs.clean_compacted)
        for listener in self.listeners:
            log.info("strom broker listening on %s:%d (%s, %s; clients are told %s:%d), data in %s",
                     listener.host or "0.0.0.0", listener.port, listener.name, listener.spec.protocol,
                     listener.advertised_host, listener.advertised_port, self.data_dir)
        if any(listener.spec.uses_sasl for listener in self.listeners) and not self.credentials.users():
            log.warning("no SASL user exists yet: nobody can log in on a SASL listener until one is added "
                        "(`strom broker add-user NAME --data-dir %s` with the broker stopped)", self.data_dir)

    def report_denial(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                      name: str) -> None:
        """Logs a refused operation (at most one line per interval, as a client may retry)."""
        held = self._denials.ready()
        if held is not None:
            log.info("denied: principal %s from %s may not %s %s %r (no ACL allows it; %d more denials "
                     "since the last line)", principal, host, operation.name, resource_type.name, name, held)

    def _every(self, seconds: float, duty: Callable[[], None]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    duty()
                except Exception:
                    log.exception("background duty %s failed", duty.__qualname__)
        self._tasks.append(asyncio.get_running_loop().create_task(loop()))

    async def stop(self) -> None:
        """Stops accepting, ends background work, flushes and closes every segment."""
        self.closing = True
        for task in self._tasks:
            task.cancel()
        for partition in self.logs.all_partitions():
            partition.wake_waiters()
        self._connections.close()
        await self.transactions.stop()
        self.logs.close()
        self._release()
        log.info("strom broker stopped; data flushed to %s", self.data_dir)


def bind_listeners(config: BrokerConfig, host: str, port: int, advertised_host: str | None,
                   saved: Path) -> list[Listener]:
    """Binds every listener (`listeners`, or PLAINTEXT on host:port) with `config` as it is, dynamic configs
    included (read from `saved`, named when a file set at run time is gone); BrokerStartError if a listener
    cannot be bound or configured (the ones already bound are closed)."""
    try:
        specs = listener_specs(config["listeners"], config["listener.security.protocol.map"], host, port)
    except ValueError as exc:
        raise BrokerStartError(f"Cannot configure the listeners: {exc}.") from None
    advertised = {e.name: e for e in parse_endpoints(config["advertised.listeners"])}
    unknown = sorted(set(advertised) - {s.name for s in specs})
    if unknown:
        raise BrokerStartError(f"advertised.listeners names {', '.join(unknown)}, which is not in listeners: "
                               "advertise only listeners the broker has.")
    unknown = sorted({name for name, _ in config.per_listener} - {s.name for s in specs})
    if unknown:
        raise BrokerStartError(f"listener.name.{unknown[0].lower()}.* configures listener {unknown[0]}, "
                               "which is not in listeners: check the listener's name.")
    client_auth = {spec.name: listener_client_auth(config.listener(spec.name), spec.protocol)
                   for spec in specs if spec.uses_tls}
    try:
        contexts = {name: server_context(config.listener(name), auth) for name, auth in client_auth.items()}
    except ListenerFileError as exc:
        if exc.key not in config.dynamic[PER_BROKER]:
            raise
        raise BrokerStartError(f"{exc} {exc.key} was set at run time and is kept in {saved}: put its file "
                               "back, or remove the key there (the listener then starts with its static "
                               "config).") from None
    bound: list[Listener] = []
    try:
        for spec in specs:
            sock = bind(spec.host or "0.0.0.0", spec.port)
            bound_port = sock.getsockname()[1]
            endpoint = advertised.get(spec.name)
            if endpoint is not None:
                where = endpoint.host, endpoint.port or bound_port
            elif advertised_host:
                where = advertised_host, bound_port
            else:
                where = (socket.getfqdn() if spec.host in WILDCARD_HOSTS else spec.host), bound_port
            authenticates = spec.uses_sasl or client_auth.get(spec.name) == "required"
            bound.append(Listener(spec, sock, bound_port, *where, contexts.get(spec.name), authenticates))
    except BaseException:
        _close(bound)
        raise
    return bound


def refuse_unauthenticated_network(listeners: list[Listener], allowed: bool) -> None:
    """A listener reachable from other machines must make clients authenticate (SASL or mutual TLS)
    unless the operator allowed otherwise: an open broker on a network lets anyone read and write."""
    for listener in listeners:
        address = listener.sock.getsockname()[0]
        if not (listener.authenticates or allowed or ipaddress.ip_address(address.split("%")[0]).is_loopback):
            raise BrokerStartError(
                f"Listener {listener.name} ({listener.spec.protocol} on {address}:{listener.port}) is "
                "reachable from other machines but does not authenticate clients: anyone could read, write "
                "and delete data. Use a SASL_SSL or SASL_PLAINTEXT listener (or SSL with "
                "ssl.client.auth=required), bind to 127.0.0.1, or pass "
                "--allow-unauthenticated-network-access if that is what you want.")


def _close(listeners: list[Listener]) -> None:
    for listener in listeners:
        listener.sock.close()


def _raise_open_files_limit() -> None:
    """Raises the soft open-files limit to the hard one, as the JVM does for Kafka: every segment and
    connection holds a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(broker: Broker, on_ready: Callable[[Broker], None] | None = None) -> None:
    """Runs `broker` until SIGINT or SIGTERM, then shuts it down cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
        if on_ready is not None:
            on_ready(broker)
        await stop.wait()
    finally:  # also after a failed start: the logs opened by Broker() are closed
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await broker.stop()
