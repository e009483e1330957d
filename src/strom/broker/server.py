"""The network side: accept connections, read size-prefixed frames, dispatch, write responses.

Requests of one connection are answered in order, one at a time, as Kafka does. A frame that is
malformed, too large or for an API the broker does not serve closes only that connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from strom.broker.fetch_response import EncodedResponse, FileRange
from strom.broker.handlers import REGISTRY, RequestContext
from strom.broker.handlers.metadata import API_VERSIONS, api_versions_response
from strom.broker.protocol import MalformedRequest, encode_response, parse_request, peek_api

if TYPE_CHECKING:
    from strom.broker.broker import Broker

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class ConnectionHandler:
    """Serves the connections of one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.open_connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._memory = MemoryBudget(broker.config["queued.max.request.bytes"])

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        if self.open_connections >= self.broker.config["max.connections"]:
            log.warning("refusing connection from %s: max.connections=%d reached", peer,
                        self.broker.config["max.connections"])
            writer.close()
            return
        self.open_connections += 1
        self._writers.add(writer)
        try:
            await self._serve(reader, writer, str(peer[0]))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except MalformedRequest as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self.open_connections -= 1
            self._writers.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        max_size = self.broker.config["socket.request.max.bytes"]
        while not self.broker.closing:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            if size < 8 or size > max_size:
                raise MalformedRequest(
                    f"frame size {size} is outside [8, socket.request.max.bytes={max_size}]")
            async with self._memory.reserve(size):
                frame = await reader.readexactly(size)
                response = await self.dispatch(frame, host)
                del frame
            if isinstance(response, EncodedResponse):
                await _send_parts(writer, response)
            elif response is not None:
                writer.write(response)
                await writer.drain()

    async def dispatch(self, frame: bytes, host: str) -> bytes | EncodedResponse | None:
        api_key, version, correlation_id = peek_api(frame)
        handler = REGISTRY.get(api_key)
        if handler is None or not handler.min_version <= version <= handler.max_version:
            if api_key == API_VERSIONS:  # clients retry with the versions we list
                return encode_response(API_VERSIONS, 0, correlation_id,
                                       api_versions_response(ErrorCode.unsupported_version))
            raise MalformedRequest(f"api_key={api_key} v{version} is not supported")
        request = parse_request(frame)
        ctx = RequestContext(self.broker, version, request.client_id or "", host, correlation_id)
        data = await handler.handle(ctx, request.body)
        if data is None or isinstance(data, EncodedResponse):
            return data
        return encode_response(api_key, version, correlation_id, data)

    def close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()


async def _send_parts(writer: asyncio.StreamWriter, response: EncodedResponse) -> None:
    """Writes encoded fields and sends file ranges with sendfile(2) (no copy through Python)."""
    loop = asyncio.get_running_loop()
    for part in response.parts:
        if isinstance(part, FileRange):
            await writer.drain()
            await loop.sendfile(writer.transport, part.file, part.position, part.length)
        else:
            writer.write(part)
    await writer.drain()


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
