"""Listeners as Kafka configures them: `listeners`, `listener.security.protocol.map` and
`advertised.listeners` (`NAME://host:port`, comma-separated; a name maps to a security protocol)."""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)
_ENDPOINT = re.compile(r"([A-Za-z0-9_]+)://(\[[0-9a-fA-F:.]+\]|[^:/\s\[\]]*):(\d{1,5})")
ENDPOINT_FORMAT = "PLAINTEXT://host:port, or NAME://host:port,... with one entry per listener"


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str
    host: str  # empty: every interface
    port: int


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One listener to bind: its name, security protocol and address."""

    name: str
    protocol: str
    host: str
    port: int

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_endpoints(value: str) -> list[Endpoint]:
    """The endpoints of a `listeners` or `advertised.listeners` value; ValueError naming the
    expected form if it is malformed or names a listener twice."""
    endpoints = []
    for item in (part.strip() for part in str(value).split(",") if part.strip()):
        found = _ENDPOINT.fullmatch(item)
        if found is None or int(found.group(3)) > 65535:
            raise ValueError(ENDPOINT_FORMAT)
        endpoints.append(Endpoint(found.group(1).upper(), found.group(2).strip("[]"), int(found.group(3))))
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise ValueError(f"{ENDPOINT_FORMAT}, each listener name once")
    return endpoints


def parse_protocol_map(value: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` as a dict; ValueError if a protocol is unknown."""
    mapping = {}
    for item in (part.strip() for part in str(value).split(",") if part.strip()):
        name, sep, protocol = item.partition(":")
        if not sep or protocol.strip().upper() not in PROTOCOLS:
            raise ValueError(f"NAME:PROTOCOL pairs, the protocol one of {', '.join(PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


def listener_specs(listeners: str, protocol_map: str, host: str, port: int) -> list[ListenerSpec]:
    """The listeners to bind: `listeners` if set, else one PLAINTEXT listener on host:port (the
    `--host`/`--port` shorthand). ValueError if a listener name has no security protocol."""
    endpoints = parse_endpoints(listeners) or [Endpoint("PLAINTEXT", host, port)]
    mapping = parse_protocol_map(protocol_map)
    specs = []
    for endpoint in endpoints:
        if endpoint.name not in mapping:
            raise ValueError(f"listener {endpoint.name} has no security protocol: add {endpoint.name}:"
                             "SASL_SSL (or another protocol) to listener.security.protocol.map")
        specs.append(ListenerSpec(endpoint.name, mapping[endpoint.name], endpoint.host, endpoint.port))
    return specs


@dataclass(slots=True)
class Listener:
    """A bound listener: where it listens, where clients are told to connect, its TLS context."""

    spec: ListenerSpec
    sock: socket.socket
    port: int
    advertised_host: str
    advertised_port: int
    tls: ssl.SSLContext | None
    authenticates: bool  # every client proves who it is (SASL, or TLS with a required certificate)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def host(self) -> str:
        return self.spec.host


@dataclass(slots=True)
class Session:
    """Who is on the other end of one connection, as far as the broker knows so far."""

    listener: Listener
    client_host: str
    principal: str = "User:ANONYMOUS"
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeded
    exchange: object | None = None  # the SASL exchange in progress
    raw_sasl: bool = False  # after SaslHandshake v0 the tokens come as bare frames, not SaslAuthenticate
    close_after_response: bool = False  # a failed authentication ends the connection
    mechanism: str = ""  # the SASL mechanism the session logged in with (a re-authentication keeps it)
    expires_at: float | None = None  # time.monotonic() after which only a re-authentication is served
    credential_expires_at: float | None = None  # an OAUTHBEARER token's exp (seconds since the epoch)
    reauthenticates: bool = False  # the client said (SaslAuthenticate v1+) it re-authenticates (KIP-368)
