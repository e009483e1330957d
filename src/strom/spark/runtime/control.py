"""The line between the driver and its stream threads during a real-time batch.

A real-time batch lasts minutes, and Spark tells the driver nothing about a task until it ends.
So each stream thread keeps a TCP connection to the driver (JSON lines, loopback in local mode,
``spark.driver.host`` on a cluster, a random token per run): on connecting it says which tasks its
Python worker holds parked and gets its assignment; after every commit it reports what its tasks
did; the driver sends ``stop`` to end the batch early. A thread whose connection breaks (the
driver died) ends its batch as if told to stop: it commits what it processed and closes.

The line is also how the driver learns that a thread is lost (its executor or Python worker died,
its machine is unreachable) long before Spark fails the task: the connection ends without the thread
saying it finished, or goes silent (a thread sends a heartbeat every ``HEARTBEAT_S``). The driver
then ends the batch early and starts the next one with the threads the task slots allow
(``strom.spark.runtime.realtime``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import secrets
import socket
import socketserver
import threading
import time
import traceback
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from strom.spark.runtime.assignment import assign_standbys, assign_tasks

__all__ = [
    "ABORTED",
    "CONNECT_TIMEOUT_S",
    "FAILED",
    "FENCED",
    "FINISHED",
    "HEARTBEAT_S",
    "MAX_LINE",
    "SILENT_S",
    "BatchAssignment",
    "ControlClient",
    "Fence",
    "ProgressListener",
    "ThreadControl",
    "ThreadMetadata",
    "driver_host",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0
MAX_LINE = 1 << 20
HEARTBEAT_S = 1.0
"""How often a stream thread tells the driver it is alive, whatever it is doing (restoring, committing)."""
SILENT_S = 10.0
"""A thread the driver has not heard from for this long is lost (a machine gone without closing its
connections); a dead process is noticed at once, its connection ends."""
FINISHED, FAILED, FENCED, ABORTED = "PENDING_SHUTDOWN", "FAILED", "FENCED", "ABORTED"
"""A thread's states as it reports them. ``FENCED``: another producer took its slot over; ``ABORTED``:
its transaction could only be aborted. Either way it ended without committing, its tasks to be opened
again from their last commit: a lost thread, not a failure."""
Fence = Callable[[list[int]], None]
"""Fences the transactional ids of these thread slots (the driver's ``init_transactions`` on each)."""


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
    standby_tasks: list[str] = field(default_factory=list)
    query_address: tuple[str, int] | None = None
    """The query endpoint of the thread's Python worker (``strom.spark.queries.server``)."""


@dataclass
class BatchAssignment:
    """The threads of one batch: who said hello, and the tasks each runs once all did.

    Tasks are assigned once every thread said hello, or ``hello_timeout_s`` after the first did: then
    only among the threads present (a thread Spark cannot schedule, its slot gone with a lost executor,
    must not hold tasks). A thread saying hello after that gets nothing and ``late`` is set: the
    driver ends the batch early so that the next one uses it."""

    batch: int
    threads: int
    tasks: Sequence[str]
    hello_timeout_s: float
    replicas: int = 0
    """``num.standby.replicas``."""
    acceptable_lag: int = 0
    """``acceptable.recovery.lag``: a standby at most this far behind takes its task over."""
    stateful: Collection[str] | None = None
    """The tasks with changelogs (the only ones with standbys); None: all."""
    suspects: Collection[int] = ()
    """Thread slots whose earlier holder may still run (a zombie): fenced before any task is assigned,
    by this batch's thread of the slot (before its hello) or, when it did not come, by ``fence``."""
    fence: Fence | None = None
    fenced: list[int] = field(default_factory=list)
    """The slots the driver fenced for this batch."""
    hellos: set[int] = field(default_factory=set)
    """Every slot whose thread said hello in this batch (late ones too): each holds its slot's id."""
    parked: dict[int, list[str]] = field(default_factory=dict)
    standbys_held: dict[int, dict[str, int]] = field(default_factory=dict)
    machines: dict[int, str] = field(default_factory=dict)
    assignment: dict[int, list[str]] | None = None
    standbys: dict[int, list[str]] = field(default_factory=dict)
    ready: threading.Condition = field(default_factory=threading.Condition)
    first_hello: float | None = None
    ended: bool = False
    late: bool = False

    def tasks_of(self, thread: int, parked: list[str], standbys: dict[str, int] | None = None,
                 machine: str = "") -> list[str] | None:
        """Waits until every thread said hello (or the timeout passed), then answers ``thread``: its
        tasks, or None when the batch ended or was assigned without it (its standbys: ``standbys``).
        ``standbys``: the standby tasks its worker holds with their lag; ``machine``: its host and state
        directory."""
        with self.ready:
            self.hellos.add(thread)
            if self.ended:
                return None
            if self.assignment is not None and thread not in self.assignment:
                self.late = True
                return None
            self.first_hello = self.first_hello or time.monotonic()
            deadline = self.first_hello + self.hello_timeout_s
            self.parked.setdefault(thread, parked)
            self.standbys_held.setdefault(thread, dict(standbys or {}))
            self.machines.setdefault(thread, machine or f"thread-{thread}")
            self.ready.notify_all()
            while self.assignment is None and not self.ended and len(self.parked) < self.threads:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.ready.wait(remaining)
            if self.ended:
                return None
            if self.assignment is None:
                if len(self.parked) < self.threads:
                    log.warning("Batch %d: %d of %d stream threads started within %.0fs; assigning the "
                                "tasks among them", self.batch, len(self.parked), self.threads,
                                self.hello_timeout_s)
                self._fence_absent()
                self.assignment = assign_tasks(self.tasks, sorted(self.parked), self.parked,
                                               self.standbys_held, self.acceptable_lag, self.stateful)
                self.standbys = assign_standbys(self.assignment, self.replicas, self.machines,
                                                self.standbys_held, self.stateful)
                log.info("Batch %d: tasks assigned to %d stream threads: %s; standbys %s", self.batch,
                         len(self.assignment), self.assignment, self.standbys)
                self.ready.notify_all()
            return self.assignment[thread]

    def _fence_absent(self) -> None:
        """Fences the suspect slots whose thread did not say hello: no earlier holder of theirs may commit
        for a task once the assignment gives it to another thread. A failure ends the batch."""
        absent = sorted(set(self.suspects) - set(self.parked))
        if absent and self.fence is not None:
            log.info("Batch %d: fencing the transactional ids of thread slots %s (no thread of theirs here)",
                     self.batch, absent)
            try:
                self.fence(absent)
            except Exception:
                self.ended = True
                self.ready.notify_all()
                raise
            self.fenced = absent

    def end(self) -> None:
        with self.ready:
            self.ended = True
            self.ready.notify_all()


ProgressListener = Callable[[str, dict[str, dict[str, int]]], None]


class ThreadControl:
    """Driver side: a small TCP server the stream threads of one application connect to."""

    def __init__(self, host: str, on_progress: ProgressListener,
                 on_standbys: ProgressListener | None = None) -> None:
        self.token = secrets.token_hex(16)
        self._on_progress = on_progress
        self._on_standbys = on_standbys
        self._lock = threading.Lock()
        self._batch: BatchAssignment | None = None
        self._connections: dict[str, _Connection] = {}
        self.threads: dict[str, ThreadMetadata] = {}
        self._lost: list[str] = []
        self._holders: dict[str, tuple[str, int]] = {}
        """Task -> the worker (host, pid) that ran it last: only there may a parked copy be taken up."""
        self.failure: str | None = None
        """The first error a thread of this run reported (its task fails the application)."""
        self._stopping = False
        self._server = _Server((host, 0), _Connection)
        self._server.control = self
        self._serving = threading.Thread(target=self._server.serve_forever, name="strom-thread-control",
                                         kwargs={"poll_interval": 0.1}, daemon=True)
        self._serving.start()

    @property
    def address(self) -> tuple[str, int]:
        return self._server.server_address[:2]

    def begin_batch(self, batch: int, threads: int, tasks: Sequence[str], hello_timeout_s: float,
                    replicas: int = 0, acceptable_lag: int = 0, stateful: Collection[str] | None = None,
                    suspects: Collection[int] = (), fence: Fence | None = None) -> BatchAssignment:
        """Starts batch ``batch``; connections of earlier batches are dropped (anything they say later is
        ignored: a frozen thread thawed, a fenced one). A thread that finished stays listed until its
        slot says hello again: its worker keeps its tasks open, parked, and answers queries for them."""
        with self._lock:
            self._batch = BatchAssignment(batch, threads, tasks, hello_timeout_s, replicas, acceptable_lag,
                                          stateful, suspects, fence)
            now = time.monotonic()
            silent = {name for name, c in self._connections.items() if now - c.heard > SILENT_S}
            self._connections = {}
            self._lost = []
            gone = [name for name, thread in self.threads.items()
                    if thread.thread_state not in ("RUNNING", FINISHED) or name in silent]
            for name in gone:
                del self.threads[name]
            return self._batch

    def reason_to_end(self) -> str | None:
        """Why the running batch should end early: a thread failed, a thread lost (its connection ended
        before it said it finished, or went silent), or a thread that started after the tasks were
        assigned."""
        now = time.monotonic()
        with self._lock:
            batch = self._batch
            if batch is None or batch.ended:
                return None
            if self.failure is not None:
                return f"stream thread failed: {self.failure}"
            silent = [c.name for c in self._connections.values() if now - c.heard > SILENT_S]
            if self._lost or silent:
                return f"stream thread lost: {', '.join(self._lost + silent)}"
            if batch.late:
                return "a stream thread started after the tasks were assigned"
        return None

    def end_batch(self) -> None:
        """Tells the threads of the running batch to commit and end it; threads saying hello later
        (retries of lost ones) get no task."""
        with self._lock:
            batch = self._batch
            connections = list(self._connections.values())
        if batch is not None:
            batch.end()
        for connection in connections:
            connection.send({"type": "stop"})

    def live_threads(self) -> int:
        """Threads of the running batch still connected and heard from within ``SILENT_S`` (committing or
        not yet told to stop): a frozen thread's open connection does not hold the batch's end."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for c in self._connections.values() if now - c.heard <= SILENT_S)

    def frozen_threads(self) -> int:
        """Threads of the running batch still connected but silent for ``SILENT_S``: no retry of theirs
        will come while Spark counts their tasks as running, so nothing is worth waiting for."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for c in self._connections.values() if now - c.heard > SILENT_S)

    def stop_threads(self) -> None:
        """Tells every connected thread, and every thread that connects from now on, to end its batch."""
        with self._lock:
            self._stopping = True
        self.end_batch()

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
        parked = list(message.get("parked", ()))
        try:
            tasks = batch.tasks_of(thread, parked, message.get("standbys"), message.get("machine", ""))
        except Exception as exc:  # fencing a lost slot failed: no task may be assigned
            with self._lock:
                self.failure = self.failure or f"fencing the slots of lost stream threads failed: {exc}"
            return {"type": "assign", "tasks": [], "stop": True}
        if tasks is None:
            return {"type": "assign", "tasks": [], "stop": True}
        name = f"stream-thread-{thread}"
        standbys = batch.standbys.get(thread, [])
        worker = (message["host"], message["pid"])
        with self._lock:
            if self._batch is not batch:
                return {"type": "assign", "tasks": [], "stop": True}
            reusable = [task for task in tasks if task in parked and self._holders.get(task) == worker]
            self._holders.update({task: worker for task in tasks})
            self._connections[name] = connection
            self.threads[name] = ThreadMetadata(name, "RUNNING", tasks, message["host"], message["pid"],
                                                batch.batch, time.time(), standbys,
                                                _address(message.get("query")))
        connection.name = name
        connection.batch = batch.batch
        connection.heard = time.monotonic()
        return {"type": "assign", "tasks": tasks, "standbys": standbys, "reusable": reusable,
                "stop": stopping}

    def _progress(self, connection: _Connection, message: dict[str, Any]) -> None:
        with self._lock:
            if self._connections.get(connection.name) is not connection:
                if message.get("state", "RUNNING") != "RUNNING":
                    log.warning("Ignoring what %s of an earlier batch reports (%s: %s): its tasks moved",
                                connection.name or "a stream thread", message.get("state"),
                                message.get("error", "-"))
                return
            if message.get("state") == FAILED and self.failure is None:
                self.failure = f"{connection.name}: {message.get('error', 'failed')}"
            metadata = self.threads.get(connection.name)
            if metadata is not None:
                metadata.last_commit = time.time()
                metadata.thread_state = message.get("state", metadata.thread_state)
        self._on_progress(connection.name, message["tasks"])
        if message.get("standbys") and self._on_standbys is not None:
            self._on_standbys(connection.name, message["standbys"])

    def _may_revive(self, connection: _Connection) -> bool:
        """Whether a thread whose transaction was aborted may open its tasks again itself: only while the
        batch that assigned them runs, not ending, and this is the connection it assigned them over. Tasks
        move only when a new batch begins (under this lock, after this answer) and each new batch fences
        every slot of the last one before assigning anything: a thread allowed here after its new producer's
        ``init_transactions`` holds the slot's newest epoch until that fence, so it can never commit a task
        that runs elsewhere, nor fence the slot's next holder."""
        with self._lock:
            batch = self._batch
            allowed = (batch is not None and batch.batch == connection.batch and not batch.ended
                       and not self._stopping and self._connections.get(connection.name) is connection)
        log.info("%s of batch %d asks to open its tasks again after an aborted transaction: %s",
                 connection.name, connection.batch,
                 "allowed" if allowed else "refused, the next batch opens them")
        return allowed

    def _gone(self, connection: _Connection) -> None:
        """A thread's connection ended: finished (it said so), failed (Spark fails or retries its
        task), or lost."""
        with self._lock:
            if self._connections.get(connection.name) is connection:
                del self._connections[connection.name]
                metadata = self.threads[connection.name]
                if metadata.thread_state not in (FINISHED, FAILED):
                    self._lost.append(connection.name)
                    metadata.thread_state = "DEAD"


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    control: ThreadControl


class _Connection(socketserver.StreamRequestHandler):
    name = ""
    batch = 0

    def setup(self) -> None:
        super().setup()
        self._send_lock = threading.Lock()
        self.heard = time.monotonic()

    def handle(self) -> None:
        control: ThreadControl = self.server.control  # type: ignore[attr-defined]
        try:
            for line in iter(lambda: self.rfile.readline(MAX_LINE), b""):
                self.heard = time.monotonic()
                message = json.loads(line)
                if message["type"] == "hello":
                    self.send(control._hello(self, message))
                elif message["type"] == "progress":
                    control._progress(self, message)
                elif message["type"] == "revive":
                    self.send({"type": "revive", "granted": control._may_revive(self)})
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
        self._send_lock = threading.Lock()
        self.stopping = threading.Event()
        self.standbys: list[str] = []
        self.reusable: list[str] = []
        """The assigned tasks this worker holds parked and may take up (no other thread ran them since)."""
        self._closed = threading.Event()
        self._revivals: queue.Queue[bool] = queue.Queue()

    def hello(self, parked: list[str], standbys: dict[str, int] | None = None,
              machine: str = "", query_address: tuple[str, int] | None = None) -> list[str]:
        """Says which tasks this worker holds (parked active ones; standbys with their lag) and on which
        machine (host and state directory); returns the tasks to run (after all threads said hello),
        and sets ``standbys`` to the standby tasks to keep."""
        self._send({"type": "hello", "token": self._token, "batch": self._batch, "thread": self._thread,
                    "pid": os.getpid(), "host": socket.gethostname(), "parked": parked,
                    "standbys": standbys or {}, "machine": machine, "query": query_address})
        self._socket.settimeout(None)
        reply = json.loads(self._file.readline(MAX_LINE) or b"{}")
        if reply.get("type") != "assign":
            raise ConnectionError("the driver closed the connection before assigning tasks")
        if reply.get("stop"):
            self.stopping.set()
        self.standbys = list(reply.get("standbys", ()))
        self.reusable = list(reply.get("reusable", ()))
        threading.Thread(target=self._listen, name="strom-thread-stop", daemon=True).start()
        threading.Thread(target=self._heartbeat, name="strom-thread-heartbeat", daemon=True).start()
        return list(reply["tasks"])

    def failed(self, error: BaseException) -> None:
        """Says the thread fails, and why: not a lost thread. The driver ends the batch and fails the
        application with ``error`` (Spark would retry the task only once a slot frees)."""
        with contextlib.suppress(OSError, ValueError):
            self._send({"type": "progress", "tasks": {}, "state": FAILED,
                        "error": "".join(traceback.format_exception_only(error)).strip()})

    def report(self, tasks: dict[str, dict[str, int]], state: str = "RUNNING",
               standbys: dict[str, dict[str, int]] | None = None) -> None:
        """What each task did since the last report (counters to add); each standby's ``lag`` and the
        records it ``restored`` since the last report."""
        try:
            self._send({"type": "progress", "tasks": tasks, "state": state,
                        **({"standbys": standbys} if standbys else {})})
        except (OSError, ValueError):  # the connection broke (ValueError: its file is closed)
            self.stopping.set()

    def may_revive(self) -> bool:
        """Asks the driver whether this thread may open its tasks again itself after an aborted transaction
        (``ThreadControl._may_revive``); False as well once the batch ends or the connection breaks."""
        try:
            self._send({"type": "revive"})
        except (OSError, ValueError):
            return False
        while True:
            try:
                return self._revivals.get(timeout=0.1)
            except queue.Empty:
                if self.stopping.is_set():
                    return False

    def close(self) -> None:
        """Ends the connection for both sides: a plain close would leave it open while the listening
        thread's file still refers to the socket (the driver would never see this thread go)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._socket.close()

    def _send(self, message: dict[str, Any]) -> None:
        with self._send_lock:
            self._file.write(json.dumps(message).encode() + b"\n")
            self._file.flush()

    def _heartbeat(self) -> None:
        while not self._closed.wait(HEARTBEAT_S):
            try:
                self._send({"type": "heartbeat"})
            except (OSError, ValueError):
                return

    def _listen(self) -> None:
        """Any ``stop``, or the connection ending (the driver is gone), ends the batch."""
        try:
            for line in iter(lambda: self._file.readline(MAX_LINE), b""):
                message = json.loads(line)
                if message.get("type") == "revive":
                    self._revivals.put(bool(message.get("granted")))
                elif message.get("type") == "stop":
                    break
        except (OSError, ValueError):
            pass
        self.stopping.set()


def _address(value: Any) -> tuple[str, int] | None:
    return None if not value else (str(value[0]), int(value[1]))


def driver_host(spark_conf: dict[str, str]) -> str:
    """Where executors reach the driver: loopback for local masters, else ``spark.driver.host``."""
    master = spark_conf.get("spark.master", "local")
    if master.startswith("local"):
        return "127.0.0.1"
    return spark_conf.get("spark.driver.host") or socket.gethostname()

