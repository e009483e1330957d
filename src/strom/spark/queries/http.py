"""The HTTP face of interactive queries: JSON reads of a running application's stores, on the driver.

``query.http.port`` (``strom run --query-port``) serves, each read one IQv2 request routed to the
stream threads (``QueryRouter``):

- ``GET /stores/<store>/keys/<key>``: a key's value (key-value store), latest version (versioned);
  ``?as_of=<ms>`` a version at a time
- ``GET /stores/<store>/range?from=<key>&to=<key>``: entries in key order per partition (bounds optional)
- ``GET /stores/<store>/keys/<key>/windows?from=<ms>&to=<ms>``: a key's windows (window store)
- ``GET /stores/<store>/windows?from=<ms>&to=<ms>``: every key's windows starting then
- ``GET /stores/<store>/keys/<key>/sessions``: a key's sessions (session store)
- ``GET /stores/<store>/metadata``: the endpoints serving the store now, with their active and standby
  partitions (``streams_metadata_for_store``)

``?stale=true`` lets standbys answer; ``?partition=<p>`` asks one partition. Answers carry the
position they reflect. A partition that could not answer (moving, its executor lost, behind a bound)
is a ``503`` with ``Retry-After`` (retriable); an unknown store or key a ``404``; a query the store
does not answer a ``400``. Path keys are strings, or numbers when the store's key serde is numeric.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from strom.errors import ConfigError, StromError
from strom.kafka.serdes import DoubleSerde, FloatSerde, IntegerSerde, LongSerde, ShortSerde
from strom.streams import config as cfg
from strom.streams.config import QUERY_HTTP_HOST, QUERY_HTTP_PORT
from strom.streams.kstream.windows import Windowed
from strom.streams.processor.internals.context import default_serde
from strom.streams.query.requests import (
    FailureReason,
    KeyQuery,
    Query,
    RangeQuery,
    StateQueryRequest,
    StateQueryResult,
    StreamsMetadata,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP
from strom.streams.state.stores import VersionedKeyValueStoreBuilder
from strom.streams.state.versioned import VersionedRecord

__all__ = ["QUERY_HTTP_HOST", "QUERY_HTTP_PORT", "QueryHttpServer", "serve_if_configured", "url_file"]

log = logging.getLogger(__name__)



class _BadRequest(StromError):
    status = 400


class _NotFound(StromError):
    status = 404


class QueryHttpServer:
    """Serves the HTTP reads of one application on ``host:port`` (0: a free port)."""

    def __init__(self, query: Callable[[StateQueryRequest], StateQueryResult],
                 metadata: Callable[[str], list[StreamsMetadata]],
                 key_parser: Callable[[str], Callable[[str], Any]], versioned: Callable[[str], bool],
                 port: int, host: str = "127.0.0.1", url_file: Path | None = None) -> None:
        self._query = query
        self._metadata = metadata
        self._key_parser = key_parser
        self._versioned = versioned
        handler = type("Handler", (_Handler,), {"face": self})
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(f"Cannot serve queries on {host}:{port}: {exc}. Choose another port (0 picks "
                              "a free one).") from exc
        self._server.daemon_threads = True
        self.host, self.port = host, self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="strom-query-http",
                                        daemon=True)
        self._thread.start()
        self._url_file = url_file
        if url_file is not None:
            url_file.parent.mkdir(parents=True, exist_ok=True)
            url_file.write_text(self.url + "\n")
        log.info("Interactive queries at http://%s:%d/stores/", host, self.port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        if self._url_file is not None:
            self._url_file.unlink(missing_ok=True)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def get(self, path: str, params: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of one GET."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if len(parts) < 3 or parts[0] != "stores":
            raise _NotFound(f"No such resource {path}: use /stores/<store>/keys/<key>, "
                            "/stores/<store>/range, /stores/<store>/keys/<key>/windows, "
                            "/stores/<store>/windows, /stores/<store>/keys/<key>/sessions or "
                            "/stores/<store>/metadata.")
        store = parts[1]
        if parts[2:] == ["metadata"]:
            return self._endpoints(store)
        query, single = self._parse(store, parts[2:], params)
        request = StateQueryRequest.in_store(store).with_query(query)
        if "partition" in params:
            request = request.with_partitions([_int(params, "partition")])
        if params.get("stale", "false").lower() != "true":
            request = request.require_active()
        try:
            result = self._query(request)
        except StromError as exc:
            raise _NotFound(str(exc)) from exc
        return _reply(store, result, single)

    def _endpoints(self, store: str) -> tuple[int, dict[str, Any]]:
        try:
            found = self._metadata(store)
        except StromError as exc:
            raise _NotFound(str(exc)) from exc
        return 200, {"store": store, "endpoints": [
            {"host": m.host_info.host, "port": m.host_info.port, "active": sorted(m.active_partitions),
             "standby": sorted(m.standby_partitions)} for m in found]}

    def _parse(self, store: str, rest: list[str], params: dict[str, str]) -> tuple[Query, bool]:
        if rest == ["range"]:
            parse = self._key_parser(store)
            bounds = [parse(params[name]) if name in params else None for name in ("from", "to")]
            return RangeQuery.with_range(*bounds), False
        if rest == ["windows"]:
            return WindowRangeQuery.with_window_start_range(_int(params, "from", 0),
                                                            _int(params, "to", MAX_TIMESTAMP)), False
        if len(rest) >= 2 and rest[0] == "keys":
            key = self._key_parser(store)(rest[1])
            if len(rest) == 2:
                if "as_of" in params or self._versioned(store):
                    query = VersionedKeyQuery.with_key(key)
                    return (query.as_of(_int(params, "as_of")) if "as_of" in params else query), True
                return KeyQuery.with_key(key), True
            if rest[2:] == ["windows"]:
                return WindowKeyQuery.with_key_and_window_start_range(
                    key, _int(params, "from", 0), _int(params, "to", MAX_TIMESTAMP)), False
            if rest[2:] == ["sessions"]:
                return WindowRangeQuery.with_key(key), False
        raise _NotFound(f"No such resource /stores/{store}/{'/'.join(rest)}.")


def _int(params: dict[str, str], name: str, default: int | None = None) -> int:
    if name not in params:
        if default is None:
            raise _BadRequest(f"Missing query parameter {name!r}.")
        return default
    try:
        return int(params[name])
    except ValueError:
        raise _BadRequest(f"Query parameter {name}={params[name]!r} is not an integer.") from None


def _reply(store: str, result: StateQueryResult, single: bool) -> tuple[int, dict[str, Any]]:
    answers = ({"global": result.global_result} if result.global_result is not None
               else dict(sorted(result.partition_results.items())))
    failures = {p: r for p, r in answers.items() if r.is_failure()}
    position = result.get_position().to_json()
    if single:  # a key lives in one partition: its answer, whatever the others say
        found = next(((p, r) for p, r in answers.items() if r.is_success() and r.result is not None), None)
        if found is not None:
            partition, answer = found
            return 200, {"store": store, "partition": partition, "value": _json(answer.result),
                         "standby": answer.standby, "position": answer.position.to_json()}
    if failures:
        partition, first = next(iter(failures.items()))
        reason = first.failure_reason
        status = 503 if reason.retriable else 400 if reason is FailureReason.UNKNOWN_QUERY_TYPE else 500
        return status, {"error": f"partition {partition}: {first.failure_message}", "reason": reason.value,
                        "retriable": reason.retriable, "position": position}
    if single:
        return 404, {"store": store, "value": None, "error": "no partition holds the key",
                     "position": position}
    entries = [_json(entry) for answer in answers.values() for entry in answer.result]
    return 200, {"store": store, "entries": entries, "position": position}


def _json(value: Any) -> Any:
    """Values as JSON: a windowed key as key, start and end; a version as value, from and to."""
    if isinstance(value, VersionedRecord):
        return {"value": _json(value.value), "timestamp": value.timestamp, "valid_to": value.valid_to}
    if isinstance(value, Windowed):
        return {"key": _json(value.key), "start": value.window.start, "end": value.window.end}
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, (str, int, float, bool, list, dict)):
        return value
    return str(value)


class _Handler(BaseHTTPRequestHandler):
    face: QueryHttpServer
    protocol_version = "HTTP/1.1"  # keep-alive: a service's client reuses its connection
    disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart (delayed ACK)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        params = {name: values[-1] for name, values in parse_qs(url.query).items()}
        try:
            status, body = self.face.get(url.path, params)
        except (_BadRequest, _NotFound, ConfigError) as exc:
            status, body = getattr(exc, "status", 400), {"error": str(exc)}
        except Exception as exc:  # a failure of ours: say it, keep serving
            log.exception("Query %s failed", self.path)
            status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if status == 503:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("query http: " + format, *args)


def serve_if_configured(config: Any, topology: Any, query: Callable[[StateQueryRequest], StateQueryResult],
                        metadata: Callable[[str], list[StreamsMetadata]]) -> QueryHttpServer | None:
    """The application's HTTP face when ``query.http.port`` is set (called by ``start()``); its URL is
    written to ``<state.dir>/<application.id>/query.url`` for ``strom streams query`` (removed on close)."""
    port = config[QUERY_HTTP_PORT]
    if port is None:
        return None
    def versioned(store: str) -> bool:
        return isinstance(_store_builder(topology, store), VersionedKeyValueStoreBuilder)

    return QueryHttpServer(query, metadata, lambda store: _key_parser(config, topology, store), versioned,
                           port, config[QUERY_HTTP_HOST],
                           url_file(config[cfg.STATE_DIR], config.application_id))


def url_file(state_dir: str | Path, application_id: str) -> Path:
    """Where a running application's driver says the URL of its HTTP face."""
    return Path(state_dir) / application_id / "query.url"


def _key_parser(config: Any, topology: Any, store: str) -> Callable[[str], Any]:
    """How a key in a URL becomes the store's key: a number for a numeric key serde, else the string."""
    store_builder = _store_builder(topology, store)
    if store_builder is None:
        return str  # the query's answer says the store is unknown
    serde = getattr(store_builder, "key_serde", None) or default_serde(config, "key", f"store {store!r}")
    if isinstance(serde, (ShortSerde, IntegerSerde, LongSerde)):
        return _number(int)
    if isinstance(serde, (FloatSerde, DoubleSerde)):
        return _number(float)
    return str


def _store_builder(topology: Any, store: str) -> Any:
    builder = topology.internal
    if store in builder.global_stores:
        return builder.global_stores[store].store_builder
    return builder.store_builders.get(store)


def _number(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise _BadRequest(f"Key {text!r} is not a number; the store's keys are numbers.") from None
    return parse
