"""SCRAM's key derivation (RFC 5802, section 3), one copy for both of its sides: strom broker's server
(``strom.broker.security.scram``) and the client that ``strom.kafka``'s wire client logs in with
(``strom.kafka.wire_login``). The standard library's PBKDF2 and HMAC only; no strom imports."""

from __future__ import annotations

import hashlib
import hmac
from typing import NamedTuple

__all__ = ["Keys", "keys", "salted_password", "signature", "stored_key", "xor"]


class Keys(NamedTuple):
    client_key: bytes
    stored_key: bytes
    server_key: bytes


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(Normalize(password), salt, i)``: PBKDF2 with HMAC of ``hash_name`` (sha256, sha512)."""
    return hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)


def keys(hash_name: str, salted: bytes) -> Keys:
    """ClientKey, StoredKey (what a server keeps to check a proof) and ServerKey of a salted password."""
    client_key = signature(hash_name, salted, b"Client Key")
    return Keys(client_key, stored_key(hash_name, client_key), signature(hash_name, salted, b"Server Key"))


def stored_key(hash_name: str, client_key: bytes) -> bytes:
    return hashlib.new(hash_name, client_key).digest()


def signature(hash_name: str, key: bytes, message: bytes) -> bytes:
    """``HMAC(key, message)``: ClientSignature with StoredKey, ServerSignature with ServerKey."""
    return hmac.digest(key, message, hash_name)


def xor(a: bytes, b: bytes) -> bytes:
    """ClientProof from ClientKey and ClientSignature, and ClientKey back from the proof."""
    return bytes(x ^ y for x, y in zip(a, b, strict=True))
