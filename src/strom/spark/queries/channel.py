"""The driver's connections to the query endpoints: one per endpoint, shared by every caller, batching.

A query costs its endpoint one store read and its worker's Python a few wake-ups (the connection's
thread wakes and waits for the interpreter lock the stream thread holds). So the callers of one
endpoint share its one connection: a caller's request leaves at once when the connection is idle;
requests that arrive while a message is in flight wait and leave together in the next message, which
the endpoint answers in one go. The caller that sends a message reads its reply and hands the
connection to the first caller waiting; no thread of the router's own is in the way.

A caller asking several endpoints (a key query over every partition) sends to all of them before it
reads any reply, so the endpoints answer at the same time.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from typing import Any

from strom.errors import InvalidStateStoreError

__all__ = ["CONNECT_TIMEOUT_S", "REPLY_TIMEOUT_S", "Address", "Channels", "Frames"]

CONNECT_TIMEOUT_S = 2.0
REPLY_TIMEOUT_S = 10.0
"""An endpoint that does not answer in this time is taken as gone (its partitions: NOT_PRESENT)."""

Address = tuple[str, int]
_HEADER = struct.Struct("!i")
_READ_SIZE = 65536


class Frames:
    """Reads the messages of a ``multiprocessing.connection`` connection (each a 4-byte length and a
    pickle) with one read of the socket for as many bytes as it holds, where ``Connection.recv`` reads
    the length and the pickle apart. Each read lets the interpreter lock go; in a worker the stream
    thread takes it meanwhile, and getting it back can wait for the thread's switch interval."""

    def __init__(self, connection: Connection) -> None:
        self._fd = connection.fileno()
        self._buffer = bytearray()

    def recv(self) -> Any:
        """The next message; EOFError when the other side closed the connection."""
        buffer = self._buffer
        while True:
            size = _HEADER.unpack_from(buffer)[0] if len(buffer) >= _HEADER.size else None
            if size is not None and size < 0:
                raise ValueError("a message of 2 GiB or more")
            if size is not None and len(buffer) >= _HEADER.size + size:
                message = pickle.loads(buffer[_HEADER.size:_HEADER.size + size])
                del buffer[:_HEADER.size + size]
                return message
            chunk = os.read(self._fd, _READ_SIZE)
            if not chunk:
                raise EOFError
            buffer += chunk


class _Call:
    """One caller's message to one endpoint: its reply (or the exception that stands for it), or the
    turn to send the waiting messages."""

    __slots__ = ("leads", "message", "replied", "reply", "waiter")

    def __init__(self, message: Any, waiter: threading.Event) -> None:
        self.message = message
        self.waiter = waiter
        self.reply: Any = None
        self.replied = False
        self.leads = False


class _Channel:
    """One endpoint's connection: at most one message in flight; the calls queued meanwhile go next."""

    def __init__(self, address: Address, token: str) -> None:
        self.address = address
        self._token = token
        self._lock = threading.Lock()
        self._queue: list[_Call] = []
        self._busy = False
        self._connection: Connection | None = None
        self._frames: Frames | None = None
        self._in_flight: list[_Call] = []

    def enqueue(self, call: _Call) -> None:
        """Queues ``call``; it leads (sends) when the connection is idle."""
        with self._lock:
            self._queue.append(call)
            if not self._busy:
                self._busy = call.leads = True

    def send(self) -> None:
        """The leader's turn: every queued call in one message (a failure replies to each)."""
        with self._lock:
            self._in_flight, self._queue = self._queue, []
        try:
            if self._connection is None:
                self._connection = self._connect()
                self._frames = Frames(self._connection)
            connection = self._connection
            connection.send([call.message for call in self._in_flight])  # each one pickled by its caller
        except Exception as exc:  # every call of the message is answered with it
            self._fail(exc)

    def receive(self) -> None:
        """The leader reads the reply to its message, answers each call of it and passes the turn on."""
        try:
            if self._in_flight:
                try:
                    replies = self._frames.recv()  # type: ignore[union-attr]
                except BlockingIOError:  # the socket's receive timeout
                    raise TimeoutError(f"no answer in {REPLY_TIMEOUT_S:.0f} s") from None
                if len(replies) != len(self._in_flight):
                    raise ValueError(f"{len(replies)} replies to {len(self._in_flight)} requests")
                for call, reply in zip(self._in_flight, replies, strict=True):
                    _reply(call, _unpickled(reply))
        except Exception as exc:
            self._fail(exc)
        finally:
            self._in_flight = []
            with self._lock:
                if self._queue:
                    follower = self._queue[0]
                    follower.leads = True
                    follower.waiter.set()
                else:
                    self._busy = False

    def _fail(self, exc: Exception) -> None:
        for call in self._in_flight:
            _reply(call, exc)
        self._in_flight = []
        self.close()

    def _connect(self) -> Connection:
        sock = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)  # Connection reads a blocking descriptor: the kernel times its reads out
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(REPLY_TIMEOUT_S), 0))
        connection = Connection(sock.detach())
        try:
            answer_challenge(connection, self._token.encode())
            deliver_challenge(connection, self._token.encode())
        except BaseException:
            connection.close()
            raise
        return connection

    def close(self) -> None:
        connection, self._connection, self._frames = self._connection, None, None
        if connection is not None:
            connection.close()


def _unpickled(data: bytes) -> Any:
    try:
        return pickle.loads(data)
    except Exception as exc:  # this answer alone: e.g. a value whose class the driver cannot import
        return exc


def _reply(call: _Call, reply: Any) -> None:
    call.reply, call.replied = reply, True
    call.waiter.set()


class Channels:
    """The router's channels, one per endpoint of the run."""

    def __init__(self) -> None:
        self._channels: dict[tuple[Address, str], _Channel] = {}
        self._lock = threading.Lock()

    def exchange(self, token: str, messages: Mapping[Address, Any]) -> dict[Address, Any]:
        """Each endpoint's reply to its message, an exception for an endpoint that failed (a reply that
        is an exception: raised by the endpoint). Each message and reply is pickled on its own: one that
        cannot be fails alone, not the others that travel with it."""
        try:
            pickled = {address: pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
                       for address, message in messages.items()}
        except Exception as exc:  # this caller's request alone: not sent
            raise InvalidStateStoreError(f"The query cannot be sent to the stream threads: {exc}. Its keys "
                                         "and bounds must be picklable values.") from exc
        waiter = threading.Event()
        calls = [(self._channel(address, token), address, _Call(data, waiter))
                 for address, data in pickled.items()]
        for channel, _, call in calls:
            channel.enqueue(call)
        while True:
            leading = []
            for channel, _, call in calls:
                if call.leads:  # given once, while queued: no other thread touches it now
                    call.leads = False
                    leading.append(channel)
            for channel in leading:
                channel.send()
            for channel in leading:
                channel.receive()
            if all(call.replied for _, _, call in calls):
                return {address: call.reply for _, address, call in calls}
            waiter.wait()  # a leader's turn is bounded: connect, handshake and reply each time out
            waiter.clear()

    def _channel(self, address: Address, token: str) -> _Channel:
        with self._lock:
            channel = self._channels.get((address, token))
            if channel is None:
                channel = self._channels[(address, token)] = _Channel(address, token)
            return channel

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, {}
        for channel in channels.values():
            channel.close()
