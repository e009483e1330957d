"""The line between the driver and its stream threads during a real-time batch.

A real-time batch lasts minutes, and Spark tells the driver nothing about a task until it ends.
So each stream thread keeps a TCP connection to the driver (JSON lines, loopback in local mode,
``spark.driver.host`` on a cluster, a random token per run): on connecting it says which tasks its
Python worker holds parked and gets its assignment; after every commit it reports what its tasks
did; the driver sends ``stop`` to end the batch early. A thread whose connection breaks (the
driver died) ends its batch as if told to stop: it commits what it processed and closes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from strom.spark.runtime.assignment import assign_tasks

__all__ = [
    "CONNECT_TIMEOUT_S",
    "MAX_LINE",
    "BatchAssignment",
    "ControlClient",
    "ProgressListener",
    "ThreadControl",
    "ThreadMetadata",
    "driver_host",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0
MAX_LINE = 1 << 20


@dataclass
class ThreadMetadata:
    """One stream thread as the driver last heard of it (Kafka's ``ThreadMetadata``)."""

    thread_name: str
    thread_state: str
    active_tasks: list[str]
    host: str
    pid: int
    batch: int
    last_commit: float = 0.0
    """``time.time()`` of the thread's last report (its last commit)."""


@dataclass
class BatchAssignment:
    """The threads of one batch: who said hello, and the tasks each runs once all did."""

    batch: int
    threads: int
    tasks: Sequence[str]
    hello_timeout_s: float
    parked: dict[int, list[str]] = field(default_factory=dict)
    assignment: dict[int, list[str]] | None = None
    ready: threading.Condition = field(default_factory=threading.Condition)

    def tasks_of(self, thread: int, parked: list[str]) -> list[str]:
        """Waits until every thread said hello (or the timeout passed), then answers ``thread``."""
        deadline = time.monotonic() + self.hello_timeout_s
        with self.ready:
            self.parked[thread] = parked
            self.ready.notify_all()
            while self.assignment is None and len(self.parked) < self.threads:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.ready.wait(remaining)
            if self.assignment is None:
                self.assignment = assign_tasks(self.tasks, self.threads, self.parked)
                self.ready.notify_all()
            return self.assignment[thread]


ProgressListener = Callable[[str, dict[str, dict[str, int]]], None]


class ThreadControl:
    """Driver side: a small TCP server the stream threads of one application connect to."""

    def __init__(self, host: str, on_progress: ProgressListener) -> None:
        self.token = secrets.token_hex(16)
        self._on_progress = on_progress
        self._lock = threading.Lock()
        self._batch: BatchAssignment | None = None
        self._connections: dict[str, _Connection] = {}
        self.threads: dict[str, ThreadMetadata] = {}
        self._stopping = False
        self._server = _Server((host, 0), _Connection)
        self._server.control = self
        self._serving = threading.Thread(target=self._server.serve_forever, name="strom-thread-control",
                                         kwargs={"poll_interval": 0.1}, daemon=True)
        self._serving.start()

    @property
    def address(self) -> tuple[str, int]:
        return self._server.server_address[:2]

    def begin_batch(self, batch: int, threads: int, tasks: Sequence[str], hello_timeout_s: float) -> None:
        with self._lock:
            self._batch = BatchAssignment(batch, threads, tasks, hello_timeout_s)

    def stop_threads(self) -> None:
        """Tells every connected thread, and every thread that connects from now on, to end its batch."""
        with self._lock:
            self._stopping = True
            connections = list(self._connections.values())
        for connection in connections:
            connection.send({"type": "stop"})

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _hello(self, connection: _Connection, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("token") != self.token:
            raise PermissionError("a stream thread of another run (wrong token)")
        with self._lock:
            batch, stopping = self._batch, self._stopping
        if batch is None or batch.batch != message["batch"] or stopping:
            return {"type": "assign", "tasks": [], "stop": True}
        thread = int(message["thread"])
        tasks = batch.tasks_of(thread, list(message.get("parked", ())))
        name = f"stream-thread-{thread}"
        with self._lock:
            self._connections[name] = connection
            self.threads[name] = ThreadMetadata(name, "RUNNING", tasks, message["host"], message["pid"],
                                                batch.batch, time.time())
        connection.name = name
        return {"type": "assign", "tasks": tasks, "stop": stopping}

    def _progress(self, connection: _Connection, message: dict[str, Any]) -> None:
        with self._lock:
            metadata = self.threads.get(connection.name)
            if metadata is not None:
                metadata.last_commit = time.time()
                metadata.thread_state = message.get("state", metadata.thread_state)
        self._on_progress(connection.name, message["tasks"])

    def _gone(self, connection: _Connection) -> None:
        with self._lock:
            if self._connections.get(connection.name) is connection:
                del self._connections[connection.name]
                self.threads[connection.name].thread_state = "DEAD"


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    control: ThreadControl


class _Connection(socketserver.StreamRequestHandler):
    name = ""

    def setup(self) -> None:
        super().setup()
        self._send_lock = threading.Lock()

    def handle(self) -> None:
        control: ThreadControl = self.server.control  # type: ignore[attr-defined]
        try:
            for line in iter(lambda: self.rfile.readline(MAX_LINE), b""):
                message = json.loads(line)
                if message["type"] == "hello":
                    self.send(control._hello(self, message))
                elif message["type"] == "progress":
                    control._progress(self, message)
        except (OSError, ValueError, KeyError, PermissionError) as exc:
            log.warning("Stream thread connection %s closed: %s", self.name or self.client_address, exc)
        finally:
            control._gone(self)

    def send(self, message: dict[str, Any]) -> None:
        with self._send_lock:
            try:
                self.wfile.write(json.dumps(message).encode() + b"\n")
                self.wfile.flush()
            except (OSError, ValueError):  # ValueError: its handler finished and closed the file
                pass  # the thread is gone; its handler ends


class ControlClient:
    """Executor side: a stream thread's connection to the driver."""

    def __init__(self, address: tuple[str, int], token: str, batch: int, thread: int) -> None:
        self._socket = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._file = self._socket.makefile("rwb")
        self._token, self._batch, self._thread = token, batch, thread
        self.stopping = threading.Event()

    def hello(self, parked: list[str]) -> list[str]:
        """Says which tasks this worker holds; returns the tasks to run (after all threads said hello)."""
        self._send({"type": "hello", "token": self._token, "batch": self._batch, "thread": self._thread,
                    "pid": os.getpid(), "host": socket.gethostname(), "parked": parked})
        self._socket.settimeout(None)
        reply = json.loads(self._file.readline(MAX_LINE) or b"{}")
        if reply.get("type") != "assign":
            raise ConnectionError("the driver closed the connection before assigning tasks")
        if reply.get("stop"):
            self.stopping.set()
        threading.Thread(target=self._listen, name="strom-thread-stop", daemon=True).start()
        return list(reply["tasks"])

    def report(self, tasks: dict[str, dict[str, int]], state: str = "RUNNING") -> None:
        """What each task did since the last report (counters to add)."""
        try:
            self._send({"type": "progress", "tasks": tasks, "state": state})
        except (OSError, ValueError):  # the connection broke (ValueError: its file is closed)
            self.stopping.set()

    def close(self) -> None:
        """Ends the connection for both sides: a plain close would leave it open while the listening
        thread's file still refers to the socket (the driver would never see this thread go)."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._socket.close()

    def _send(self, message: dict[str, Any]) -> None:
        self._file.write(json.dumps(message).encode() + b"\n")
        self._file.flush()

    def _listen(self) -> None:
        """Any ``stop``, or the connection ending (the driver is gone), ends the batch."""
        try:
            for line in iter(lambda: self._file.readline(MAX_LINE), b""):
                if json.loads(line).get("type") == "stop":
                    break
        except (OSError, ValueError):
            pass
        self.stopping.set()


def driver_host(spark_conf: dict[str, str]) -> str:
    """Where executors reach the driver: loopback for local masters, else ``spark.driver.host``."""
    master = spark_conf.get("spark.master", "local")
    if master.startswith("local"):
        return "127.0.0.1"
    return spark_conf.get("spark.driver.host") or socket.gethostname()

