"""The broker: storage, coordinators, background duties and the listener, wired together."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import resource
import signal
import socket
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from strom.broker.config import BrokerConfig, parse_listener
from strom.broker.groups.coordinator import GroupCoordinator
from strom.broker.groups.offsets import OffsetStore
from strom.broker.handlers import load_handlers
from strom.broker.log.manager import InvalidPartitionsError, LogManager, Topic
from strom.broker.metrics import BrokerMetrics
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.server import ConnectionHandler, bind
from strom.broker.throttle import LOG_INTERVAL_SECONDS, Throttle
from strom.broker.transactions.service import TransactionService
from strom.errors import BrokerStartError

log = logging.getLogger(__name__)

SESSION_CHECK_SECONDS = 0.5
FLUSH_CHECK_SECONDS = 1.0
IDLE_CHECK_SECONDS = 1.0
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class Broker:
    """A single-node broker serving the Kafka protocol from `data_dir`."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1", port: int = 9092,
                 config: Mapping[str, Any] | None = None, advertised_host: str | None = None) -> None:
        """Binds the port first and then takes the data directory, so a start that cannot listen
        creates nothing; raises BrokerStartError saying what to do."""
        self.config = BrokerConfig(config)
        self.host = host
        self._listener = bind(host, port)
        self.port: int = self._listener.getsockname()[1]
        self.advertised_host, self.advertised_port = advertised_address(
            self.config["advertised.listeners"], advertised_host, host, self.port)
        self.data_dir = Path(data_dir).resolve()
        self._lock: int | None = None
        try:
            self._lock = _lock_data_dir(self.data_dir)
            self.cluster_id = self._cluster_id()
            self._open_storage()
        except BaseException:
            self._release()
            raise

    def _open_storage(self) -> None:
        self._auto_create_errors = Throttle(LOG_INTERVAL_SECONDS)
        _raise_open_files_limit()
        self.node_id: int = self.config["node.id"]
        self.closing = False
        load_handlers()
        self.logs = LogManager(self.data_dir, self.config)
        self.producer_ids = ProducerIdManager(self.data_dir)
        self.offsets = OffsetStore(self.logs)
        self.groups = GroupCoordinator(self.config, self.offsets)
        self.transactions = TransactionService(self.data_dir, self.config, self.logs, self.groups,
                                               self.producer_ids)
        self.metrics = BrokerMetrics()
        self._connections = ConnectionHandler(self)
        self._tasks: list[asyncio.Task] = []

    def _release(self) -> None:
        """Closes the listener and gives up the data directory (at stop and after a failed start)."""
        self._listener.close()
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
        self._connections.start(self._listener)
        self._every(SESSION_CHECK_SECONDS, self.groups.expire_sessions)
        self._every(self.config["offsets.retention.check.interval.ms"] / 1000, self.groups.expire_offsets)
        self._every(FLUSH_CHECK_SECONDS, self.logs.flush_due)
        self._every(IDLE_CHECK_SECONDS, self._connections.close_idle)
        self._every(self.config["log.retention.check.interval.ms"] / 1000, self.logs.apply_retention)
        self._every(self.config["log.cleaner.backoff.ms"] / 1000, self.logs.clean_compacted)
        log.info("strom broker listening on %s:%d (clients are told %s:%d), data in %s", self.host,
                 self.port, self.advertised_host, self.advertised_port, self.data_dir)

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


def _lock_data_dir(data_dir: Path) -> int:
    """Creates the data directory and locks it for this process (`<data dir>/.lock`, as Kafka's), so
    two brokers never write one log; returns the lock's descriptor."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise BrokerStartError(f"Cannot use {data_dir} as the data directory: "
                               f"{os.strerror(exc.errno or 0)}. Pass a writable --data-dir.") from exc
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.pread(descriptor, 20, 0).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        raise BrokerStartError(f"{data_dir} is used by another strom broker (pid {owner}): stop it, or "
                               "pass another --data-dir.") from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, str(os.getpid()).encode(), 0)
    return descriptor


def advertised_address(listeners: str, advertised_host: str | None, host: str, port: int) -> tuple[str, int]:
    """Where clients are told to connect: `advertised.listeners`, else `--advertised-host` and the
    bound port, else the bound address, except that a wildcard (0.0.0.0, ::) is replaced by this
    machine's name: clients cannot connect to a wildcard."""
    parsed = parse_listener(listeners)
    if parsed is not None:
        return parsed[0], parsed[1] or port
    if advertised_host:
        return advertised_host, port
    return (socket.getfqdn() if host in WILDCARD_HOSTS else host), port


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
