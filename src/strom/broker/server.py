"""The network side: accept connections, read size-prefixed frames, dispatch, write responses.

Requests of one connection are answered in order, one at a time, as Kafka does. A frame that is
malformed, too large or for an API the broker does not serve closes only that connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from strom.broker.handlers import REGISTRY, RequestContext
from strom.broker.handlers.metadata import API_VERSIONS, api_versions_response
from strom.broker.log.segment import FileRange
from strom.broker.produce_request import parse_produce
from strom.broker.protocol import (
    EncodedResponse,
    MalformedRequest,
    encode_response,
    parse_request,
    peek_api,
    unsupported_version_response,
)
from strom.errors import BrokerStartError

if TYPE_CHECKING:
    from strom.broker.broker import Broker

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
KEPT_BUFFER_BYTES = 2 << 20
PRODUCE = 0


class ConnectionHandler:
    """Accepts and serves the connections of one broker.

    Sockets are read with `sock_recv_into` straight into one buffer per frame (no stream buffer
    to copy through) and Fetch records go out with `sock_sendfile`.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()  # one per open connection
        self._last_active: dict[asyncio.Task, float] = {}
        self._memory = MemoryBudget(broker.config["queued.max.request.bytes"])

    @property
    def open_connections(self) -> int:
        return len(self._tasks)

    async def start(self, host: str, port: int) -> int:
        """Starts listening; returns the bound port."""
        try:
            listener = socket.create_server((host, port), reuse_port=False, backlog=512)
        except OSError as exc:
            raise BrokerStartError(
                f"Cannot listen on {host}:{port}: {os.strerror(exc.errno or 0)}. Stop the process using "
                "the port or choose another one (--port; 0 picks a free port).") from exc
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.get_running_loop().create_task(self._accept(listener))
        return listener.getsockname()[1]

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            connection, peer = await loop.sock_accept(listener)
            if self.open_connections >= self.broker.config["max.connections"]:
                log.warning("refusing connection from %s: max.connections=%d reached; raise "
                            "max.connections or find the client that opens connections without "
                            "closing them", peer, self.broker.config["max.connections"])
                connection.close()
                continue
            connection.setblocking(False)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._connection(connection, peer))
            self._tasks.add(task)
            self._last_active[task] = time.monotonic()
            task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._last_active.pop(task, None)

    def close_idle(self) -> None:
        """Closes connections that sent nothing for connections.max.idle.ms."""
        limit = time.monotonic() - self.broker.config["connections.max.idle.ms"] / 1000
        for task, last in list(self._last_active.items()):
            if last < limit:
                log.info("closing a connection idle for more than connections.max.idle.ms")
                task.cancel()

    async def _connection(self, sock: socket.socket, peer: tuple) -> None:
        try:
            await self._serve(sock, str(peer[0]))
        except (ConnectionError, EOFError):
            pass
        except MalformedRequest as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            sock.close()

    async def _serve(self, sock: socket.socket, host: str) -> None:
        loop = asyncio.get_running_loop()
        max_size = self.broker.config["socket.request.max.bytes"]
        size_buffer = bytearray(4)
        kept = bytearray(0)  # reused for frames up to KEPT_BUFFER_BYTES: no allocation per request
        me = asyncio.current_task()
        while not self.broker.closing:
            await _receive(loop, sock, memoryview(size_buffer))
            self._last_active[me] = time.monotonic()
            (size,) = _SIZE.unpack(size_buffer)
            if size > max_size:
                raise MalformedRequest(
                    f"a frame of {size} bytes exceeds socket.request.max.bytes={max_size}; raise that "
                    "config if the client really sends requests this large (a TLS or HTTP client on "
                    "this plaintext Kafka port looks like this too)")
            if size < 8:
                raise MalformedRequest(f"a frame of {size} bytes cannot hold a request header: the "
                                       "client does not speak the Kafka protocol")
            async with self._memory.reserve(size):
                if size > len(kept) and size <= KEPT_BUFFER_BYTES:
                    kept = bytearray(max(size, min(2 * len(kept), KEPT_BUFFER_BYTES)))
                frame = memoryview(kept if size <= len(kept) else bytearray(size))[:size]
                await _receive(loop, sock, frame)
                response = await self.dispatch(frame.toreadonly(), host)
            self.broker.metrics.response(response)
            if isinstance(response, EncodedResponse):
                await _send_parts(loop, sock, response)
            elif response is not None:
                await loop.sock_sendall(sock, response)

    async def dispatch(self, frame: memoryview, host: str) -> bytes | EncodedResponse | None:
        api_key, version, correlation_id = peek_api(frame)
        self.broker.metrics.request(api_key, len(frame))
        handler = REGISTRY.get(api_key)
        if handler is None or not handler.min_version <= version <= handler.max_version:
            if api_key == API_VERSIONS:  # clients retry with the versions we list
                return encode_response(API_VERSIONS, 0, correlation_id,
                                       api_versions_response(ErrorCode.unsupported_version))
            refusal = unsupported_version_response(api_key, version, correlation_id)
            if refusal is None:
                raise MalformedRequest(
                    f"api_key={api_key} v{version} is not served and cannot be refused with an error "
                    "code; the client must pick APIs and versions from ApiVersions")
            served = f"v{handler.min_version}-v{handler.max_version}" if handler else "no version"
            log.warning("answered UNSUPPORTED_VERSION to api_key=%d v%d from %s: this broker serves %s "
                        "of it; use a client that negotiates versions with ApiVersions",
                        api_key, version, host, served)
            return refusal
        request = parse_produce(frame) if api_key == PRODUCE else parse_request(frame)
        ctx = RequestContext(self.broker, version, request.client_id or "", host, correlation_id)
        data = await handler.handle(ctx, request.body)
        if data is None or isinstance(data, EncodedResponse):
            return data
        return encode_response(api_key, version, correlation_id, data)

    def close(self) -> None:
        """Stops accepting and ends every connection."""
        if self._accepting is not None:
            self._accepting.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._listener is not None:
            self._listener.close()


async def _receive(loop: asyncio.AbstractEventLoop, sock: socket.socket, view: memoryview) -> None:
    """Fills `view` from the socket; EOFError if the peer closes first."""
    while view:
        received = await loop.sock_recv_into(sock, view)
        if not received:
            raise EOFError
        view = view[received:]


async def _send_parts(loop: asyncio.AbstractEventLoop, sock: socket.socket,
                      response: EncodedResponse) -> None:
    """Sends encoded fields, and file ranges with sendfile(2) (no copy through Python)."""
    for part in response.parts:
        if isinstance(part, FileRange):
            await loop.sock_sendfile(sock, part.file, part.position, part.length)
        else:
            await loop.sock_sendall(sock, part)


class MemoryBudget:
    """Bounds the request bytes held at once: a connection waits for room before reading a frame."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.available = capacity
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def reserve(self, size: int) -> AsyncIterator[None]:
        size = min(size, self.capacity)  # one frame may always use the whole budget
        async with self._changed:
            await self._changed.wait_for(lambda: self.available >= size)
            self.available -= size
        try:
            yield
        finally:
            async with self._changed:
                self.available += size
                self._changed.notify_all()
