"""The query endpoint of a Python worker: its stream threads' stores answer the driver's requests.

One endpoint per worker process and run (``serve_queries``), started when the worker's first stream
thread of the run says hello; the thread's address for it travels to the driver in the hello. The
endpoint holds the thread itself, so it always serves the tasks and standbys the thread has open now.
The transport is the standard library's ``multiprocessing.connection``: framed pickled messages on
a TCP connection the driver keeps open, authenticated with the run's random token (HMAC challenge on
connect), so only the driver of the run can ask.

A request is answered on the endpoint's own thread from the stores' committed state
(``strom.streams.query.evaluate``): processing never waits for a query, and a query waits for no more
than its store reads.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import socket
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from typing import Any, Protocol

from strom.errors import InvalidStateStoreError
from strom.spark.queries.channel import Frames
from strom.streams.query.evaluate import TaskStores, answer
from strom.streams.query.requests import Position, StateQueryRequest, StateQueryResult

__all__ = ["QueryEndpoint", "QueryRequest", "seed_positions", "serve_queries"]

log = logging.getLogger(__name__)

QueryRequest = tuple[StateQueryRequest, list[str]]
"""A request of the driver and the task ids to answer it for (none: a global store); a message of the
driver is a list of them (the requests of its callers that came together), its reply a list of their
answers."""


class _Thread(Protocol):
    """What the endpoint reads of a stream thread (``strom.spark.runtime.thread.StreamThread``)."""

    tasks: Mapping[str, Any]
    standbys: Mapping[str, Any]


class QueryEndpoint:
    """Serves one run's requests from the stores of the stream thread it holds."""

    def __init__(self, token: str, host: str, advertised: str) -> None:
        self.token = token
        self._listener = socket.create_server((host, 0))
        self.address = (advertised, self._listener.getsockname()[1])
        self.thread: _Thread | None = None
        self._closed = False
        threading.Thread(target=self._accept, name="strom-query-endpoint", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                continue
            threading.Thread(target=self._serve, args=(sock,), name="strom-query", daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        """One caller's connection: the token's challenge both ways (in this thread, so that a caller who
        never answers holds up no other), then its requests one after the other."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = Connection(sock.detach())
        try:
            deliver_challenge(connection, self.token.encode())
            answer_challenge(connection, self.token.encode())
        except Exception as exc:  # AuthenticationError, a caller gone: refuse it, keep serving
            log.warning("Query endpoint: refused a connection: %s", exc)
            connection.close()
            return
        frames = Frames(connection)
        with connection:
            while not self._closed:
                try:
                    requests = frames.recv()
                except (EOFError, OSError):
                    return
                if self._closed:  # a later run's endpoint serves this worker now
                    return
                try:
                    connection.send(self.answer_all(requests))
                except (OSError, ValueError):
                    return

    def answer_all(self, requests: list[bytes]) -> list[bytes]:
        """Each pickled request of a message answered, pickled on its own: an answer, or the exception
        that stands for it (the driver gives it to that caller alone)."""
        replies = []
        for data in requests:
            try:
                request, task_ids = pickle.loads(data)
                reply: Any = self._answer(request, task_ids)
            except Exception as exc:  # never lose the connection over one request
                log.exception("Query endpoint: answering a request failed")
                reply = exc
            try:
                replies.append(pickle.dumps(reply, pickle.HIGHEST_PROTOCOL))
            except Exception as exc:  # an answer holding a value that cannot be pickled
                replies.append(pickle.dumps(InvalidStateStoreError(
                    f"the answer could not be sent to the driver: {type(exc).__name__}: {exc}")))
        return replies

    def _answer(self, request: StateQueryRequest, task_ids: list[str]) -> StateQueryResult:
        """The request answered for ``task_ids`` from what the thread holds now; a task it does not hold
        is not in the answer (the driver reports it as not present)."""
        bounded = not request.position_bound.is_unbounded
        partitions = {int(task_id.rsplit("_", 1)[1]): held for task_id in task_ids
                      if (held := self._held(task_id, bounded)) is not None}
        return answer(request, partitions, self._global_stores() if not task_ids else None)

    def _held(self, task_id: str, bounded: bool) -> TaskStores | None:
        """The stores of ``task_id`` as the thread holds them now: its active task's, else its standby's
        (one look-up each: the thread adds and removes tasks meanwhile). ``bounded``: the request has a
        position bound, so a standby's next update reads how far the active committed (its position)."""
        thread = self.thread
        if thread is None:
            return None
        running = thread.tasks.get(task_id)
        if running is not None:
            return TaskStores(running.open.task.context.stores, _position(running.open.task))
        standby = thread.standbys.get(task_id)
        if standby is None:
            return None
        if bounded:
            standby.bound_asked = True
        return TaskStores(standby.task.context.stores, _position(standby.task), standby=True)

    def _global_stores(self) -> Mapping[str, Any]:
        thread = self.thread
        for running in list(thread.tasks.values()) if thread is not None else ():
            return running.open.task.context.global_stores
        raise LookupError("no task open in this worker to read the global stores of")


def _position(task: Any) -> Any:
    return lambda: Position.of_partitions(task.committed_position)


_ENDPOINTS: dict[str, QueryEndpoint] = {}
"""This worker's endpoint per application (one run at a time)."""
_LOCK = threading.Lock()


def serve_queries(thread: Any, application_id: str, token: str,
                  driver: tuple[str, int]) -> tuple[str, int] | None:
    """Makes ``thread`` the one this worker's endpoint for ``application_id`` serves from (a new endpoint
    for a new run); returns the endpoint's address as the driver reaches it. None when no endpoint could
    listen (logged): the thread processes all the same, its partitions answer NOT_PRESENT."""
    with _LOCK:
        endpoint = _ENDPOINTS.get(application_id)
        if endpoint is None or endpoint.token != token:
            if endpoint is not None:
                endpoint.close()
                del _ENDPOINTS[application_id]
            try:
                host, advertised = _bind_host(driver)
                endpoint = _ENDPOINTS[application_id] = QueryEndpoint(token, host, advertised)
            except OSError as exc:
                log.warning("No query endpoint for %s in this worker: %s", application_id, exc)
                return None
        endpoint.thread = thread
        return endpoint.address


def seed_positions(tasks: Any) -> None:
    """Before the tasks process: their position is where they start, the offset before each committed
    one (their stores hold what the records before it wrote); commits move it on."""
    for running in tasks:
        position = running.open.task.committed_position
        for tp, offset in running.open.positions.items():
            position.setdefault(tp, offset - 1)


def _bind_host(driver: tuple[str, int]) -> tuple[str, str]:
    """Where to listen and the address to give the driver: loopback when the driver is local, else every
    interface, advertised as the address this machine reaches the driver from."""
    if driver[0].startswith("127.") or driver[0] == "localhost":
        return "127.0.0.1", "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(driver)  # UDP: no packet is sent; the kernel picks the route's local address
        return "0.0.0.0", probe.getsockname()[0]
