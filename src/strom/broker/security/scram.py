"""SCRAM (RFC 5802, RFC 7677) on the server side, and the credentials it checks.

The keys are derived by ``strom.scram`` (shared with strom's SCRAM client: the standard library's PBKDF2
and HMAC). A credential keeps the salt, the iteration count and the two keys derived from the salted
password, never the password.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from strom import scram as derivation

MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 32


class Mechanism(IntEnum):
    """Kafka's ScramMechanism codes."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is Mechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def named(cls, name: str) -> Mechanism:
        """The mechanism called `name` (SCRAM-SHA-256 ...); ValueError if there is none."""
        try:
            return cls[name.strip().upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"{name!r} is not a SCRAM mechanism: SCRAM-SHA-256 or SCRAM-SHA-512") from None


@dataclass(frozen=True, slots=True)
class Credential:
    mechanism: Mechanism
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(cls, mechanism: Mechanism, salt: bytes, iterations: int,
                             salted_password: bytes) -> Credential:
        derived = derivation.keys(mechanism.hash_name, salted_password)
        return cls(mechanism, salt, iterations, derived.stored_key, derived.server_key)

    @classmethod
    def from_password(cls, mechanism: Mechanism, password: str, iterations: int = DEFAULT_ITERATIONS,
                      salt: bytes | None = None) -> Credential:
        salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
        return cls.from_salted_password(mechanism, salt, iterations, derivation.salted_password(
            mechanism.hash_name, password, salt, iterations))

    def matches_password(self, password: str) -> bool:
        """Whether `password` is the one this credential was made from (SASL/PLAIN checks this)."""
        other = Credential.from_password(self.mechanism, password, self.iterations, self.salt)
        return hmac.compare_digest(other.stored_key, self.stored_key)

    def __repr__(self) -> str:  # the keys let an attacker who has them log in: never printed
        return f"Credential({self.mechanism.mechanism_name}, iterations={self.iterations})"


class ScramError(Exception):
    """The exchange failed; the message is safe to send to the client and to log."""


def _attributes(message: str) -> dict[str, str]:
    attributes = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed SCRAM message attribute {key!r}")
        attributes.setdefault(key, value)
    return attributes


def _username(saslname: str) -> str:
    if "=" in saslname.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM user name")
    return saslname.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One server-side SCRAM exchange: `first` answers client-first, `final` client-final.

    `lookup(user)` gives the user's credential for this mechanism, or None."""

    def __init__(self, mechanism: Mechanism, lookup: Callable[[str], Credential | None],
                 server_nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24)) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self.username: str | None = None
        self._credential: Credential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def first(self, message: bytes) -> bytes:
        text = message.decode("utf-8", errors="strict")
        flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y"):
            raise ScramError("channel binding is not supported")
        attributes = _attributes(bare)
        if "n" not in attributes or "r" not in attributes:
            raise ScramError("client-first message without user name or nonce")
        username = _username(attributes["n"])
        if authzid and _username(authzid.removeprefix("a=")) != username:
            raise ScramError("the authorization id differs from the user name")
        credential = self._lookup(username)
        if credential is None:
            raise ScramError("unknown user")
        self.username, self._credential = username, credential
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = attributes["r"] + self._server_nonce()
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        """The server-final message; ScramError if the proof is wrong."""
        credential = self._credential
        if credential is None:
            raise ScramError("client-final message before client-first")
        text = message.decode("utf-8", errors="strict")
        without_proof, _, proof_part = text.rpartition(",p=")
        attributes = _attributes(without_proof)
        if attributes.get("r") != self._nonce:
            raise ScramError("the nonce does not match")
        if attributes.get("c") != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("the channel binding does not match")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        name = self.mechanism.hash_name
        signature = derivation.signature(name, credential.stored_key, auth_message)
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("malformed client proof") from None
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = derivation.xor(proof, signature)
        if not hmac.compare_digest(derivation.stored_key(name, client_key), credential.stored_key):
            raise ScramError("invalid credentials")
        return b"v=" + base64.b64encode(derivation.signature(name, credential.server_key, auth_message))
