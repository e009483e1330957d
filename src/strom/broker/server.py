"""The network side: accept connections, read size-prefixed frames, dispatch, write responses.

Requests of one connection are answered in order, one at a time, as Kafka does. A frame that is
malformed, too large or for an API the broker does not serve closes only that connection.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import mmap
import os
import resource
import socket
import ssl
import struct
import time
from typing import TYPE_CHECKING, BinaryIO

from kio.schema.errors import ErrorCode

from strom.broker.handlers import REGISTRY, ApiHandler, RequestContext
from strom.broker.handlers.metadata import API_VERSIONS, api_versions_response
from strom.broker.handlers.security import sasl_step
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
from strom.broker.security.listeners import Listener, Session
from strom.broker.security.tls import TlsChannel, certificate_principal
from strom.broker.throttle import LOG_INTERVAL_SECONDS, Throttle
from strom.errors import BrokerStartError

if TYPE_CHECKING:
    from strom.broker.broker import Broker

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
FIRST_READ_BYTES = 64 << 10
OFF_LOOP_BYTES = 256 << 10  # requests other than Produce above this are decoded in a worker thread
LARGE_REQUEST_MAX_BYTES = 8 << 20  # the largest request other than Produce
DECODED_SIZE_FACTOR = 24  # memory of a decoded request (kio entities) per byte of its frame
ACCEPT_RETRY_SECONDS = 0.1
PRODUCE = 0
BEFORE_AUTHENTICATION = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate
TLS_HANDSHAKE_SECONDS = 10.0
SASL_MAX_RECEIVE_BYTES = 512 << 10


class ConnectionHandler:
    """Accepts and serves the connections of one broker.

    Sockets are read with `sock_recv_into` straight into one buffer per frame (no stream buffer
    to copy through) and Fetch records go out with `sock_sendfile`.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._listeners: list[Listener] = []
        self._accepting: list[asyncio.Task] = []
        self._tasks: set[asyncio.Task] = set()  # one per open connection
        self._last_active: dict[asyncio.Task, float] = {}
        self._memory = MemoryBudget(broker.config["queued.max.request.bytes"])
        self._accept_errors = Throttle(LOG_INTERVAL_SECONDS)
        self._refusals = Throttle(LOG_INTERVAL_SECONDS)
        self._per_address: dict[str, int] = {}
        self._between_requests: set[asyncio.Task] = set()  # connections waiting for their next request
        self._evicted: set[asyncio.Task] = set()  # cancelled for a new client, not yet finished
        self._evictions = Throttle(LOG_INTERVAL_SECONDS)
        self._handshake_failures = Throttle(LOG_INTERVAL_SECONDS)

    @property
    def open_connections(self) -> int:
        return len(self._tasks)

    def start(self, listeners: list[Listener]) -> None:
        """Starts accepting on listeners bound by the broker."""
        for listener in listeners:
            listener.sock.setblocking(False)
            self._size_buffers(listener.sock)
            self._listeners.append(listener)
            self._accepting.append(asyncio.get_running_loop().create_task(self._accept(listener)))

    def _size_buffers(self, sock: socket.socket) -> None:
        """Kafka's fixed socket buffers, set on the listening socket so that accepted connections
        inherit them and their TCP window scale is chosen for them."""
        for key, option in (("socket.receive.buffer.bytes", socket.SO_RCVBUF),
                            ("socket.send.buffer.bytes", socket.SO_SNDBUF)):
            if self.broker.config[key] != -1:
                sock.setsockopt(socket.SOL_SOCKET, option, self.broker.config[key])

    async def _accept(self, listener: Listener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, peer = await loop.sock_accept(listener.sock)
            except OSError as exc:  # EMFILE and the like: the connection waits in the backlog
                self._accept_failed(exc)
                await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            limit = self._limit_reached(peer[0])
            if limit == "max.connections" and self._evict_longest_idle():
                limit = None
            if limit is not None:
                held = self._refusals.ready()
                if held is not None:
                    log.warning("refusing connection from %s: %s=%d reached; raise %s or find the client "
                                "that opens connections without closing them (%d more refused since the "
                                "last line)", peer, limit, self.broker.config[limit], limit, held)
                connection.close()
                continue
            connection.setblocking(False)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = loop.create_task(self._connection(connection, peer, listener))
            self._tasks.add(task)
            self._last_active[task] = time.monotonic()
            self._per_address[peer[0]] = self._per_address.get(peer[0], 0) + 1
            task.add_done_callback(functools.partial(self._forget, peer[0]))

    def _accept_failed(self, exc: OSError) -> None:
        held = self._accept_errors.ready()
        if held is None:
            return
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            log.error("cannot accept connections: too many open files (limit %d); new clients wait until "
                      "descriptors are free. Raise the limit (ulimit -n) or lower max.connections "
                      "(%d similar errors since the last line)", _open_files_limit(), held)
        else:
            log.error("cannot accept a connection: %s (%d similar errors since the last line)", exc, held)

    def _limit_reached(self, address: str) -> str | None:
        """The config key of the limit a new connection from `address` would exceed, if any."""
        if self._per_address.get(address, 0) >= self.broker.config["max.connections.per.ip"]:
            return "max.connections.per.ip"
        if self.open_connections - len(self._evicted) >= self.broker.config["max.connections"]:
            return "max.connections"
        return None

    def _evict_longest_idle(self) -> bool:
        """Makes room for a new client at `max.connections` by closing the connection that has waited
        longest for its next request, as Kafka's broker does; False if every connection is in the
        middle of a request (then the new one is refused)."""
        waiting = [task for task in self._between_requests if task not in self._evicted]
        if not waiting:
            return False
        victim = min(waiting, key=self._last_active.__getitem__)
        idle = time.monotonic() - self._last_active[victim]
        held = self._evictions.ready()
        if held is not None:
            log.info("max.connections=%d reached: closing the connection idle longest (%.1f s) for a new "
                     "client (%d more since the last line)", self.broker.config["max.connections"], idle,
                     held)
        self._evicted.add(victim)
        victim.cancel()
        return True

    def _forget(self, address: str, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        self._between_requests.discard(task)
        self._evicted.discard(task)
        self._last_active.pop(task, None)
        remaining = self._per_address.pop(address, 1) - 1
        if remaining:
            self._per_address[address] = remaining

    def close_idle(self) -> None:
        """Closes connections that sent nothing for connections.max.idle.ms."""
        limit = time.monotonic() - self.broker.config["connections.max.idle.ms"] / 1000
        for task, last in list(self._last_active.items()):
            if last < limit:
                log.info("closing a connection idle for more than connections.max.idle.ms")
                task.cancel()

    async def _connection(self, sock: socket.socket, peer: tuple, listener: Listener) -> None:
        try:
            channel = await self._open_channel(sock, peer, listener)
            if channel is not None:
                await self._serve(channel, channel_session(channel, listener, str(peer[0])))
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

    async def _open_channel(self, sock: socket.socket, peer: tuple,
                            listener: Listener) -> PlainChannel | TlsChannel | None:
        """The connection's channel once its TLS handshake (if any) is done; None if it failed
        (logged: a client that does not trust us, an untrusted client certificate, plaintext)."""
        context = self.broker.dynamic_configs.tls.context(listener)  # a rotated certificate's, if any
        if context is None:
            return PlainChannel(sock)
        channel = TlsChannel(sock, context)
        try:
            await asyncio.wait_for(channel.handshake(), TLS_HANDSHAKE_SECONDS)
        except (ssl.SSLError, TimeoutError, ConnectionError) as exc:
            reason = ("timed out" if isinstance(exc, TimeoutError)  # an OSError too: checked first
                      else getattr(exc, "reason", None) or exc.strerror or type(exc).__name__)
            held = self._handshake_failures.ready()
            if held is not None:
                log.info("TLS handshake with %s on listener %s failed (%s): the client does not trust this "
                         "broker's certificate, sent none or an untrusted one, or does not speak TLS "
                         "(%d more since the last line)", peer[0], listener.name, reason, held)
            return None
        return channel

    async def _serve(self, channel: PlainChannel | TlsChannel, session: Session) -> None:
        max_size = self.broker.config["socket.request.max.bytes"]
        size_buffer = bytearray(4)
        me = asyncio.current_task()
        while not self.broker.closing:
            self._between_requests.add(me)
            await _receive(channel, memoryview(size_buffer))
            self._between_requests.discard(me)
            self._last_active[me] = time.monotonic()
            (size,) = _SIZE.unpack(size_buffer)
            if size > max_size:
                raise MalformedRequest(
                    f"a frame of {size} bytes exceeds socket.request.max.bytes={max_size}; raise that "
                    "config if the client really sends requests this large (a TLS or HTTP client on "
                    f"a plaintext Kafka port looks like this too; this is listener {session.listener.name}, "
                    f"{session.listener.spec.protocol})")
            if not session.authenticated and size > SASL_MAX_RECEIVE_BYTES:
                raise MalformedRequest(f"a frame of {size} bytes before SASL authentication (at most "
                                       f"{SASL_MAX_RECEIVE_BYTES}, as Kafka's sasl.server.max.receive.size)")
            if session.raw_sasl:
                await self._raw_sasl_step(channel, session, size)
            elif size < 8:
                raise MalformedRequest(f"a frame of {size} bytes cannot hold a request header: the "
                                       "client does not speak the Kafka protocol")
                continue
            response = await self._answer(channel, size, session)
            self.broker.metrics.response(response)
            if isinstance(response, EncodedResponse):
                await _send_parts(channel, response)
            elif response is not None:
                await channel.sendall(response)
            del response  # an idle connection holds no buffer
            if session.close_after_response:
                return

    async def _raw_sasl_step(self, channel: PlainChannel | TlsChannel, session: Session, size: int) -> None:
        """A bare SASL token after SaslHandshake v0 (old clients), answered bare; a failure closes."""
        token = bytearray(size)
        await _receive(channel, memoryview(token))
        answer, failure = await sasl_step(self.broker, session, bytes(token))
        if failure is not None:
            raise EOFError(failure)
        await channel.sendall(_SIZE.pack(len(answer)) + answer)

    async def _answer(self, channel: PlainChannel | TlsChannel, size: int,
                      session: Session) -> bytes | EncodedResponse | None:
        """Reads one request frame and handles it; its memory is given back once it is answered."""
        held = [0]
        try:
            frame = await self._read_frame(channel, size, held)
            return await self.dispatch(memoryview(frame).toreadonly(), session, held)
        finally:
            self._memory.give_back(held[0])

    async def _read_frame(self, channel: PlainChannel | TlsChannel, size: int,
                          held: list[int]) -> bytearray | mmap.mmap:
        """The frame's bytes. Memory is taken from the budget as they arrive, for at most twice
        what the client has sent (and 64 KiB), so a size prefix alone holds next to nothing;
        `held[0]` says how much to give back. A frame above 64 KiB is read into an anonymous
        mapping, whose pages become resident only as bytes arrive. No buffer outlives its request."""
        me = asyncio.current_task()
        frame = bytearray(size) if size <= FIRST_READ_BYTES else mmap.mmap(-1, size)
        received = 0
        while received < size:
            step = min(size, max(FIRST_READ_BYTES, 2 * received)) - received
            await self._memory.take(step, holding=held[0])
            held[0] += step
            await _receive(channel, memoryview(frame)[received:received + step])
            received += step
            self._last_active[me] = time.monotonic()
            if received == step and size > LARGE_REQUEST_MAX_BYTES and peek_api(frame)[0] != PRODUCE:
                raise MalformedRequest(
                    f"a frame of {size} bytes for api_key={peek_api(frame)[0]}: requests other than Produce "
                    f"may have at most {LARGE_REQUEST_MAX_BYTES} bytes (decoding them takes about "
                    f"{DECODED_SIZE_FACTOR} times their size); split the request")
        return frame

    async def dispatch(self, frame: memoryview, session: Session,
                       held: list[int]) -> bytes | EncodedResponse | None:
        api_key, version, correlation_id = peek_api(frame)
        host = session.client_host
        if session.expires_at is not None and time.monotonic() > session.expires_at:
            log.info("closing the connection of %s from %s: its SASL session expired without "
                     "re-authentication (its token's exp or connections.max.reauth.ms)",
                     session.principal, host)
            raise EOFError
        if not session.authenticated and api_key not in BEFORE_AUTHENTICATION:
            raise MalformedRequest(
                f"api_key={api_key} before SASL authentication on listener {session.listener.name}: the "
                "client must authenticate first (set security.protocol=" + session.listener.spec.protocol +
                " and sasl.mechanism, sasl.username, sasl.password)")
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
        if api_key == PRODUCE:
            request = parse_produce(frame)
        elif len(frame) > OFF_LOOP_BYTES:
            return await self._dispatch_large(frame, session, handler, held)
        else:
            request = parse_request(frame)
        ctx = RequestContext(self.broker, version, request.client_id or "", host, correlation_id, session)
        data = await handler.handle(ctx, request.body)
        if data is None or isinstance(data, EncodedResponse):
            return data
        return encode_response(api_key, version, correlation_id, data)

    async def _dispatch_large(self, frame: memoryview, session: Session, handler: ApiHandler,
                              held: list[int]) -> bytes | EncodedResponse | None:
        """A large request other than Produce: its decoded form is taken from the memory budget and
        it is decoded and its answer encoded in a worker thread, so other clients keep being served."""
        decoded = DECODED_SIZE_FACTOR * len(frame)
        await self._memory.take(decoded, holding=held[0])
        held[0] += decoded
        request = await asyncio.to_thread(parse_request, frame)
        ctx = RequestContext(self.broker, request.api_version, request.client_id or "", session.client_host,
                             request.correlation_id, session)
        data = await handler.handle(ctx, request.body)
        if data is None or isinstance(data, EncodedResponse):
            return data
        return await asyncio.to_thread(encode_response, request.api_key, request.api_version,
                                       request.correlation_id, data)

    def close(self) -> None:
        """Stops accepting and ends every connection."""
        for accepting in self._accepting:
            accepting.cancel()
        for task in list(self._tasks):
            task.cancel()
        for listener in self._listeners:
            listener.sock.close()


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on host:port (connections wait in its backlog until `start`); a
    BrokerStartError that names the cause and what to do if it cannot be had."""
    where = f"{host}:{port}"
    if not 0 <= port <= 65535:
        raise BrokerStartError(f"Cannot listen on {where}: a TCP port is 0-65535 (0 picks a free port).")
    try:
        return socket.create_server((host, port), reuse_port=False, backlog=512)
    except socket.gaierror as exc:
        raise BrokerStartError(f"Cannot listen on {where}: the host name does not resolve ({exc.strerror}). "
                               "Pass an address of this machine (--host 127.0.0.1 or 0.0.0.0).") from exc
    except OSError as exc:
        advice = {
            errno.EADDRINUSE: "Stop the process using the port or choose another one (--port; 0 picks "
                              "a free port).",
            errno.EADDRNOTAVAIL: f"{host} is not an address of this machine: pass 127.0.0.1 (this machine "
                                 "only), 0.0.0.0 (every interface) or the address of one of its interfaces, "
                                 "and --advertised-host for the name clients should use.",
            errno.EACCES: "Ports below 1024 need privileges: choose a port above 1023.",
        }.get(exc.errno or 0, "Choose another --host or --port.")
        raise BrokerStartError(f"Cannot listen on {where}: {os.strerror(exc.errno or 0)}. {advice}") from exc


def _open_files_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def _receive(channel: PlainChannel | TlsChannel, view: memoryview) -> None:
    """Fills `view` from the channel; EOFError if the peer closes first."""
    while view:
        received = await channel.recv_into(view)
        if not received:
            raise EOFError
        view = view[received:]


async def _send_parts(channel: PlainChannel | TlsChannel, response: EncodedResponse) -> None:
    """Sends encoded fields, and file ranges (with sendfile(2) on plaintext: no copy through Python)."""
    for part in response.parts:
        if isinstance(part, FileRange):
            await channel.sendfile(part.file, part.position, part.length)
        else:
            await channel.sendall(part)


class PlainChannel:
    """A plaintext connection: the event loop's socket operations."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()

    async def recv_into(self, view: memoryview) -> int:
        return await self._loop.sock_recv_into(self._sock, view)

    async def sendall(self, data: bytes | memoryview) -> None:
        await self._loop.sock_sendall(self._sock, data)

    async def sendfile(self, file: BinaryIO, position: int, length: int) -> None:
        await self._loop.sock_sendfile(self._sock, file, position, length)


def channel_session(channel: PlainChannel | TlsChannel, listener: Listener, client_host: str) -> Session:
    """A new connection's session: on a SASL listener it must authenticate first; on TLS a client
    certificate names the principal (`User:CN=...`), otherwise it is User:ANONYMOUS."""
    session = Session(listener, client_host, authenticated=not listener.spec.uses_sasl)
    if isinstance(channel, TlsChannel) and not listener.spec.uses_sasl:
        session.principal = certificate_principal(channel.tls) or session.principal
    return session


class MemoryBudget:
    """Bounds the request bytes held at once over all connections (queued.max.request.bytes).

    Connections take memory as their frames' bytes arrive and give it back after the response; a
    connection that needs more than is left waits until others give some back. Connections that
    hold part of a frame could each wait for the others' memory for ever, so one of them at a time
    may go beyond the budget (as Kafka's memory pool lets one request overshoot): the bound is the
    budget plus one request."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.available = capacity
        self._waiters: list[asyncio.Future] = []
        self._overdrawing: asyncio.Task | None = None

    async def take(self, size: int, holding: int = 0) -> None:
        """Waits until `size` bytes are free. A caller already `holding` some waits at most for the
        rest of the budget, so a frame larger than the budget still gets all of it in the end."""
        needed = min(size, self.capacity - holding)
        while self.available < needed:
            if holding and self._overdrawing in (None, asyncio.current_task()):
                self._overdrawing = asyncio.current_task()
                break
            future = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
            try:
                await future
            finally:
                if future in self._waiters:
                    self._waiters.remove(future)
        self.available -= size

    def give_back(self, size: int) -> None:
        if self._overdrawing is asyncio.current_task():
            self._overdrawing = None
        self.available += size
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)
