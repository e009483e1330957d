"""A minimal blocking Kafka protocol client for requests librdkafka does not expose.

Operator commands (ListTransactions, DescribeTransactions, DescribeProducers) and protocol-level
tests send kio request entities and get kio response entities back, one request at a time.
"""

from __future__ import annotations

import io
import itertools
import socket
import struct
from collections.abc import Mapping
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader, entity_writer

from strom.errors import BrokerUnavailableError
from strom.kafka.security import authentication_error
from strom.kafka.wire_login import sasl_login, secure

__all__ = ["WireClient"]

_SIZE = struct.Struct(">i")


class WireClient:
    """One connection to one broker (the first of ``bootstrap_servers``)."""

    def __init__(self, bootstrap_servers: str, client_id: str = "strom", timeout: float = 10.0,
                 settings: Mapping[str, Any] | None = None) -> None:
        """``settings``: librdkafka's security keys (``security.protocol``, ``ssl.*``, ``sasl.*``;
        see ``strom.kafka.wire_login``)."""
        host, _, port = bootstrap_servers.split(",")[0].strip().rpartition(":")
        try:
            self._socket = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout)
        except (OSError, ValueError) as exc:
            raise BrokerUnavailableError(
                f"Could not connect to a broker at {bootstrap_servers!r} ({exc}). Start one with "
                "`strom broker` or pass the right --bootstrap-servers.") from exc
        self._client_id = client_id
        self._correlation = itertools.count(1)
        settings = settings or {}
        self._handshaken = False
        self._socket = secure(self._socket, host or "127.0.0.1", settings)
        sasl_login(settings, lambda mechanism, token: self._sasl(bootstrap_servers, settings, mechanism,
                                                                 token))

    def _sasl(self, servers: str, settings: Mapping[str, Any], mechanism: str, token: bytes) -> bytes:
        """One SASL token exchanged (SaslHandshake first); a refusal says why, at once."""
        if not self._handshaken:
            self._handshaken = True
            answer = self.send(SaslHandshakeRequest(mechanism=mechanism))
            if answer.error_code != ErrorCode.none:
                raise authentication_error(settings, servers, f"SASL mechanism {mechanism} not enabled: "
                                                              f"the broker offers {list(answer.mechanisms)}")
        answer = self.send(SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code != ErrorCode.none:
            raise authentication_error(settings, servers, answer.error_message or answer.error_code.name)
        return answer.auth_bytes

    def send(self, request: Any, response_schema: type | None = None) -> Any:
        """Sends a kio request entity and returns the broker's kio response entity (read as
        ``response_schema`` if given: a kio-style dataclass for an answer kio's own schema cannot read)."""
        return self.receive(request, self.send_only(request), response_schema)

    def send_only(self, request: Any) -> int:
        """Writes the request without reading the answer; returns its correlation id."""
        correlation_id = next(self._correlation)
        header_schema = request.__header_schema__
        buffer = io.BytesIO()
        entity_writer(header_schema)(buffer, header_schema(
            request_api_key=request.__api_key__, request_api_version=request.__version__,
            correlation_id=correlation_id, client_id=self._client_id))
        entity_writer(type(request))(buffer, request)
        payload = buffer.getvalue()
        self._socket.sendall(_SIZE.pack(len(payload)) + payload)
        return correlation_id

    def receive(self, request: Any, correlation_id: int, response_schema: type | None = None) -> Any:
        """Reads the answer to a request sent with ``send_only`` (answers come back in order)."""
        (size,) = _SIZE.unpack(self._read(4))
        frame = self._read(size)
        schema = response_schema or load_response_schema(request.__api_key__, request.__version__)
        header, header_size = entity_reader(schema.__header_schema__)(frame, 0)
        if header.correlation_id != correlation_id:
            raise BrokerUnavailableError(
                f"Broker answered correlation id {header.correlation_id}, expected {correlation_id}: "
                "the connection is out of step; reconnect.")
        response, _ = entity_reader(schema)(frame, header_size)
        return response

    def _read(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self._socket.recv(size - len(chunks))
            if not chunk:
                raise BrokerUnavailableError("The broker closed the connection; check its log.")
            chunks += chunk
        return bytes(chunks)

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
