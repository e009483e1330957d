"""A throwaway OAuth identity provider on loopback for the OAUTHBEARER tests: an RSA key published as a
JWKS (``jwks_url``), tokens signed with it (``token``), and a client-credentials token endpoint
(``token_url``) such as librdkafka's ``sasl.oauthbearer.method=oidc`` asks. Paths under ``/token/``
choose what the endpoint issues: ``/token`` a valid token, ``/token/expired`` an expired one,
``/token/invalid`` a token signed by a key the JWKS does not hold."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER, AUDIENCE = "https://idp.strom.test", "strom-cluster"


class IdentityProvider:
    def __init__(self, issuer: str = ISSUER, audience: str = AUDIENCE) -> None:
        self.issuer, self.audience = issuer, audience
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # not in the JWKS
        self.kid = "strom-test-1"
        self.jwks_fetches = 0  # GET /jwks answered (or refused)
        self.jwks_failures = 0  # how many of the next GET /jwks are answered 503
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="idp")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def rotate(self) -> None:
        """A new signing key with a new kid: the JWKS holds only it from now on."""
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = f"strom-test-{int(self.kid.rsplit('-', 1)[1]) + 1}"

    def claims(self, sub: str = "alice", lifetime_s: float = 600, **extra: Any) -> dict[str, Any]:
        """The claims of a valid token of ``sub``; ``extra`` adds or (with None) removes claims."""
        now = int(time.time())
        claims = {"sub": sub, "iss": self.issuer, "aud": self.audience, "iat": now,
                  "exp": now + int(lifetime_s), "scope": "kafka", "client_id": sub, **extra}
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, claims: dict[str, Any] | None = None, *, alg: str = "RS256", kid: str | None = "",
              stranger: bool = False) -> str:
        """``claims`` (by default ``claims()``) signed with the published key (or one the JWKS lacks)."""
        headers = {} if kid is None else {"kid": kid or self.kid}
        key = self.stranger if stranger else self.key
        return jwt.encode(self.claims() if claims is None else claims, key, algorithm=alg, headers=headers)

    def _issued(self, path: str) -> str:
        if path.endswith("/expired"):
            return self.token(self.claims(iat=int(time.time()) - 3600, exp=int(time.time()) - 600))
        return self.token(stranger=path.endswith("/invalid"))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/jwks":
                    provider.jwks_fetches += 1
                    if provider.jwks_failures > 0:
                        provider.jwks_failures -= 1
                        return self._json({"error": "temporarily unavailable"}, 503)
                self._json(provider.jwks() if self.path == "/jwks" else None)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.startswith("/token"):
                    return self._json(None)
                self._json({"access_token": provider._issued(self.path), "token_type": "bearer",
                            "expires_in": 600})

            def _json(self, body: dict[str, Any] | None, status: int = 200) -> None:
                data = json.dumps(body or {"error": "not found"}).encode()
                self.send_response(status if body is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> IdentityProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
