"""TLS for listeners with the standard library's `ssl`: the server context from PEM files, a
channel that runs TLS over a non-blocking socket through memory BIOs, and the principal of a
client certificate."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from typing import TYPE_CHECKING

from strom.errors import BrokerStartError

if TYPE_CHECKING:
    from strom.broker.config import ListenerConfig

RECEIVE_BYTES = 256 << 10
FILE_CHUNK_BYTES = 1 << 20
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# RFC 2253 short names, as Java's X500Principal prints a subject (Kafka's default SSL principal)
_SHORT_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
                "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
                "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}


def server_context(config: ListenerConfig, client_auth: str) -> ssl.SSLContext:
    """The TLS context of a listener (``config``: its view, so ``listener.name.<listener>.ssl.*`` win over
    ``ssl.*`` as in Kafka) asking clients for a certificate as `client_auth` says (none, requested,
    required); BrokerStartError naming the key to fix (never the password) if a file cannot be read or
    the key not decrypted."""
    keystore_key, password_key, truststore_key = (_named(config, key) for key in (
        "ssl.keystore.location", "ssl.key.password", "ssl.truststore.location"))
    keystore = config["ssl.keystore.location"]
    if not keystore:
        raise BrokerStartError(f"A TLS listener (SSL or SASL_SSL) needs {keystore_key}: a PEM file with the "
                               "broker's private key and certificate chain.")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(keystore, password=config["ssl.key.password"] or None)
    except FileNotFoundError as exc:
        raise BrokerStartError(f"Cannot read {keystore_key}={keystore}: no such file.") from exc
    except (ssl.SSLError, OSError) as exc:
        raise BrokerStartError(
            f"Cannot load the private key and certificate from {keystore_key}={keystore} ({_reason(exc)}): "
            f"the file must hold a PEM private key and its certificate chain, and {password_key} must "
            "decrypt the key if it is encrypted.") from None
    truststore = config["ssl.truststore.location"]
    if truststore:
        try:
            context.load_verify_locations(truststore)
        except (ssl.SSLError, OSError) as exc:
            raise BrokerStartError(f"Cannot read the CA certificates of {truststore_key}={truststore} "
                                   f"({_reason(exc)}): pass a PEM file of CA certificates.") from None
    elif client_auth != "none":
        raise BrokerStartError(f"ssl.client.auth={client_auth} needs {truststore_key}: the PEM file of the "
                               "CAs that sign client certificates.")
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def listener_client_auth(config: ListenerConfig, protocol: str) -> str:
    """What a TLS listener asks of clients: ``ssl.client.auth`` on an SSL listener; on SASL_SSL only when
    set for that listener (``listener.name.<listener>.ssl.client.auth``), as Kafka does (KIP-684): its
    clients authenticate with SASL."""
    if protocol == "SSL" or config.overrides("ssl.client.auth"):
        return config["ssl.client.auth"]
    return "none"


def _named(config: ListenerConfig, key: str) -> str:
    """``key`` as the operator set it: with the listener's prefix if the listener overrides it."""
    return f"listener.name.{config.listener.lower()}.{key}" if config.overrides(key) else key


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__


def certificate_principal(tls: ssl.SSLObject) -> str | None:
    """`User:<subject DN>` of a verified client certificate (RFC 2253, most specific part first, as
    Kafka's default principal builder names it), None without one."""
    certificate = tls.getpeercert()
    if not certificate:
        return None
    parts = []
    for rdn in reversed(certificate.get("subject", ())):
        parts.append("+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn))
    return "User:" + ",".join(parts)


def _escape(value: str) -> str:
    escaped = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    return escaped[:-1] + "\\ " if escaped.endswith(" ") and len(escaped) > 1 else escaped


class TlsChannel:
    """TLS over a non-blocking socket: records go through memory BIOs, so the server reads and
    writes the socket with the event loop as it does for plaintext connections."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self) -> None:
        """Runs the TLS handshake; ssl.SSLError if the client is not trusted or does not speak TLS. The
        alert saying why (an untrusted certificate: "unknown ca") is sent first, as Kafka's broker sends
        it: without it the client sees only a closed connection."""
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()
            except ssl.SSLError:
                with contextlib.suppress(OSError):  # the client may have gone already
                    await self._flush()
                raise
        await self._flush()

    async def recv_into(self, view: memoryview) -> int:
        """Decrypted bytes into `view`: every record already received that fits, so a large frame
        costs one call per socket read rather than one per TLS record; 0 once the client closed."""
        received = 0
        while received < len(view):
            try:
                count = self.tls.read(len(view) - received, view[received:])
            except ssl.SSLWantReadError:
                if received:
                    break
                if self._outgoing.pending:  # a TLS 1.3 key update or session ticket
                    await self._flush()
                if not await self._fill():
                    return 0
                continue
            except ssl.SSLZeroReturnError:
                break
            if not count:  # the client's close_notify
                break
            received += count
        if self._outgoing.pending:
            await self._flush()
        return received

    async def sendall(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = self.tls.write(view)
            view = view[written:]
            await self._flush()

    async def sendfile(self, file: object, position: int, length: int) -> None:
        """A file range, encrypted: TLS cannot use sendfile(2), so it is read in chunks."""
        fd = file.fileno()  # type: ignore[attr-defined]
        end = position + length
        while position < end:
            chunk = await asyncio.to_thread(os.pread, fd, min(FILE_CHUNK_BYTES, end - position), position)
            if not chunk:
                raise EOFError("the segment is shorter than the range being sent")
            await self.sendall(chunk)
            position += len(chunk)

    async def _fill(self) -> bool:
        data = await asyncio.get_running_loop().sock_recv(self._sock, RECEIVE_BYTES)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await asyncio.get_running_loop().sock_sendall(self._sock, self._outgoing.read())

