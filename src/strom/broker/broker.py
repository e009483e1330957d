"""The broker: storage, coordinators, background duties and the listener, wired together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from strom.broker.config import BrokerConfig
from strom.broker.groups.coordinator import GroupCoordinator
from strom.broker.groups.offsets import OffsetStore
from strom.broker.handlers import load_handlers
from strom.broker.log.manager import InvalidPartitionsError, LogManager, Topic
from strom.broker.producer_ids import ProducerIdManager
from strom.broker.server import ConnectionHandler
from strom.broker.throttle import LOG_INTERVAL_SECONDS, Throttle
from strom.broker.transactions.service import TransactionService
from strom.errors import BrokerStartError

log = logging.getLogger(__name__)

SESSION_CHECK_SECONDS = 0.5
FLUSH_CHECK_SECONDS = 1.0
IDLE_CHECK_SECONDS = 1.0


class Broker:
    """A single-node broker serving the Kafka protocol from `data_dir`."""

    def __init__(self, data_dir: Path, host: str = "127.0.0.1", port: int = 9092,
                 config: Mapping[str, Any] | None = None) -> None:
        self.config = BrokerConfig(config)
        self.data_dir = Path(data_dir).resolve()
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.cluster_id = self._cluster_id()
        except OSError as exc:
            raise BrokerStartError(f"Cannot use {self.data_dir} as the data directory: "
                                   f"{os.strerror(exc.errno or 0)}. Pass a writable --data-dir.") from exc
        self.host = host
        self.port = port
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
        self._connections = ConnectionHandler(self)
        self._tasks: list[asyncio.Task] = []

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
        self.port = await self._connections.start(self.host, self.port)
        self._every(SESSION_CHECK_SECONDS, self.groups.expire_sessions)
        self._every(self.config["offsets.retention.check.interval.ms"] / 1000, self.groups.expire_offsets)
        self._every(FLUSH_CHECK_SECONDS, self.logs.flush_due)
        self._every(IDLE_CHECK_SECONDS, self._connections.close_idle)
        self._every(self.config["log.retention.check.interval.ms"] / 1000, self.logs.apply_retention)
        self._every(self.config["log.cleaner.backoff.ms"] / 1000, self.logs.clean_compacted)
        log.info("strom broker listening on %s:%d, data in %s", self.host, self.port, self.data_dir)

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
        log.info("strom broker stopped; data flushed to %s", self.data_dir)


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
