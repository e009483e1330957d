"""TLS for listeners with the standard library's `ssl`: the server context from PEM files (replaced at
run time when a listener's certificate is rotated), a channel that runs TLS over a non-blocking socket
through memory BIOs, and the principal of a client certificate."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509

from strom.errors import BrokerStartError

if TYPE_CHECKING:
    from strom.broker.config import BrokerConfig, ListenerConfig
    from strom.broker.security.listeners import Listener

log = logging.getLogger(__name__)

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
    required); ListenerFileError naming the key to fix (never the password) if a file cannot be read, the
    key not decrypted, or a key password is set for a key that is not encrypted (Kafka refuses it too)."""
    keystore_key, password_key, truststore_key = (_named(config, key) for key in (
        "ssl.keystore.location", "ssl.key.password", "ssl.truststore.location"))
    keystore, password = config["ssl.keystore.location"], config["ssl.key.password"]
    if not keystore:
        raise ListenerFileError(f"A TLS listener (SSL or SASL_SSL) needs {keystore_key}: a PEM file with the "
                                "broker's private key and certificate chain.", keystore_key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    asked: list[bool] = []  # OpenSSL asks for the password only of a key that is encrypted

    def key_password() -> str:
        asked.append(True)
        return password
    try:
        context.load_cert_chain(keystore, password=key_password if password else None)
    except FileNotFoundError as exc:
        raise ListenerFileError(f"Cannot read {keystore_key}={keystore}: no such file.",
                                keystore_key) from exc
    except (ssl.SSLError, OSError) as exc:
        raise ListenerFileError(
            f"Cannot load the private key and certificate from {keystore_key}={keystore} ({_reason(exc)}): "
            f"the file must hold a PEM private key and its certificate chain, and {password_key} must "
            "decrypt the key if it is encrypted.", keystore_key) from None
    if password and not asked:
        raise ListenerFileError(
            f"{password_key} is set, but the private key in {keystore_key}={keystore} is not encrypted "
            f"(Kafka refuses a key password for it too): remove {password_key}, or use the key encrypted "
            "with that password.", password_key)
    truststore = config["ssl.truststore.location"]
    if truststore:
        try:
            context.load_verify_locations(truststore)
        except (ssl.SSLError, OSError) as exc:
            raise ListenerFileError(f"Cannot read the CA certificates of {truststore_key}={truststore} "
                                    f"({_reason(exc)}): pass a PEM file of CA certificates.",
                                    truststore_key) from None
    elif client_auth != "none":
        raise ListenerFileError(f"ssl.client.auth={client_auth} needs {truststore_key}: the PEM file of the "
                                "CAs that sign client certificates.", truststore_key)
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def listener_client_auth(config: ListenerConfig, protocol: str) -> str:
    """What a TLS listener asks of clients: ``ssl.client.auth`` on an SSL listener; on SASL_SSL only when
    set for that listener (``listener.name.<listener>.ssl.client.auth``), as Kafka does (KIP-684): its
    clients authenticate with SASL."""
    if protocol == "SSL" or config.overrides("ssl.client.auth"):
        return config["ssl.client.auth"]
    return "none"


class ListenerFileError(BrokerStartError):
    """A listener's keystore or truststore that cannot be used; ``key`` names the config to fix as the
    operator set it (``listener.name.<listener>.ssl.*`` if the listener sets it itself)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class KeystoreRefused(ValueError):
    """A listener's new keystore or truststore does not load, its certificate does not match the one in use,
    or it is a truststore for a listener without one (Kafka answers INVALID_REQUEST); nothing changed."""


@dataclass(frozen=True, slots=True)
class Certificate:
    """What a listener's certificate says it is, compared when it is replaced (as Kafka compares them)."""

    subject: x509.Name
    alternative_names: frozenset[x509.GeneralName]
    serial: int
    expires: str

    @classmethod
    def of_keystore(cls, path: str) -> Certificate:
        """The first certificate of a PEM keystore (the broker's own; its chain follows)."""
        leaf = x509.load_pem_x509_certificates(Path(path).read_bytes())[0]
        try:
            names = frozenset(leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
        except x509.ExtensionNotFound:
            names = frozenset()
        return cls(leaf.subject, names, leaf.serial_number, leaf.not_valid_after_utc.isoformat())

    def refusal(self, new: Certificate, config: ListenerConfig, key: str) -> str | None:
        """Why ``new`` may not replace this certificate unless the operator allowed it, None if it may:
        another subject, or a subject alternative name of this one missing."""
        if self.subject != new.subject and not config["ssl.allow.dn.changes"]:
            return (f"The certificate in {key} is for {new.subject.rfc4514_string()}, the one in use for "
                    f"{self.subject.rfc4514_string()}: clients may expect that name. Issue it for the same "
                    f"subject, or start the broker with {_named(config, 'ssl.allow.dn.changes')}=true.")
        missing = self.alternative_names - new.alternative_names
        if missing and not config["ssl.allow.san.changes"]:
            return (f"The certificate in {key} lacks the subject alternative names "
                    f"{', '.join(sorted(str(n.value) for n in missing))} of the one in use: clients "
                    "connecting by those names would be refused. Issue it with them, or start the broker "
                    f"with {_named(config, 'ssl.allow.san.changes')}=true.")
        return None


class ListenerTls:
    """The TLS context each listener gives new connections: the one it was bound with until its keystore
    or truststore is set at run time (``listener.name.<listener>.ssl.*``, Kafka's dynamic listener SSL
    configs); connections already open keep the context they started with."""

    def __init__(self, config: BrokerConfig, listeners: Iterable[Listener]) -> None:
        """``listeners``: as bound, with the contexts of ``config`` (its dynamic configs included)."""
        self._config = config
        self._protocols = {listener.name: listener.spec.protocol for listener in listeners
                           if listener.spec.uses_tls}
        self._contexts: dict[str, ssl.SSLContext] = {listener.name: listener.tls for listener in listeners
                                                     if listener.tls is not None}
        self._certificates = {name: _in_use(config.listener(name)["ssl.keystore.location"])
                              for name in self._protocols}

    def context(self, listener: Listener) -> ssl.SSLContext | None:
        return self._contexts.get(listener.name, listener.tls)

    def listeners(self, keys: Iterable[str]) -> set[str]:
        """The listeners whose TLS files ``listener.name.<listener>.ssl.*`` keys name; KeystoreRefused if
        one is not a TLS listener of this broker."""
        named = {key.split(".")[2].upper() for key in keys if key.startswith("listener.name.")}
        unknown = sorted(named - set(self._protocols))
        if unknown:
            raise KeystoreRefused(f"listener.name.{unknown[0].lower()}.* names listener {unknown[0]}, which "
                                  "is not a TLS listener of this broker (those are: "
                                  f"{', '.join(sorted(self._protocols)) or 'none'}).")
        return named

    def reload(self, names: Iterable[str]) -> Callable[[], None]:
        """Reads the keystore and truststore of listeners ``names`` again, as the config now names them;
        KeystoreRefused naming the key (never a password) if one does not load, its certificate does not
        match the one in use, or it adds a truststore to a listener that has none (as Kafka refuses it).
        Returns what puts the new contexts in use."""
        built = {}
        for name in names:
            config = self._config.listener(name)
            truststore = config["ssl.truststore.location"]
            if truststore and not _trusts(self._contexts[name]):
                raise KeystoreRefused(
                    f"Cannot add {_named(config, 'ssl.truststore.location')}={truststore} to listener "
                    f"{name}, which has no truststore (Kafka adds none at run time either): give the "
                    "listener its truststore in the broker's config and restart it.")
            try:
                context = server_context(config, listener_client_auth(config, self._protocols[name]))
            except ListenerFileError as exc:
                raise KeystoreRefused(str(exc)) from None
            key = f"{_named(config, 'ssl.keystore.location')}={config['ssl.keystore.location']}"
            try:
                certificate = Certificate.of_keystore(config["ssl.keystore.location"])
            except ValueError as exc:
                raise KeystoreRefused(f"Cannot read the certificate of {key}: {exc}.") from None
            current = self._certificates[name]
            refusal = current.refusal(certificate, config, key) if current is not None else None
            if refusal is not None:
                raise KeystoreRefused(refusal)
            built[name] = context, certificate, key

        def use() -> None:
            for name, (context, certificate, key) in built.items():
                self._contexts[name], self._certificates[name] = context, certificate
                log.info("listener %s: new connections get the certificate of %s (%s, serial %x, valid until "
                         "%s); open connections keep theirs", name, key, certificate.subject.rfc4514_string(),
                         certificate.serial, certificate.expires)
        return use


def _in_use(keystore: str) -> Certificate | None:
    """The certificate of a keystore the listener loaded at start; None if it is not one `cryptography`
    reads (then a rotation is not compared with it)."""
    try:
        return Certificate.of_keystore(keystore)
    except (ValueError, OSError):
        log.warning("cannot read the certificate of %s: a certificate set at run time will not be compared "
                    "with it", keystore)
        return None


def _trusts(context: ssl.SSLContext) -> bool:
    """Whether a listener's context has a truststore (server_context loads CA certificates from it only):
    Kafka adds none at run time to a listener that started without one."""
    return context.cert_store_stats()["x509"] > 0


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

