"""Serving a Prometheus registry over HTTP: one helper for the Spark driver, ``strom tasks run`` and the
broker (each builds its own registry of collectors that read their figures when scraped)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

from strom.errors import ConfigError

log = logging.getLogger(__name__)


class MetricsServer:
    """``/metrics`` of ``collectors`` on ``host:port`` (port 0 picks a free port: see ``port``)."""

    def __init__(self, collectors: Iterable[Collector], port: int, host: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in collectors:
            self.registry.register(collector)
        try:
            self._server, self._thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"Cannot serve metrics on {host}:{port}: {exc}. Choose another port "
                              "(0 picks a free one).") from exc
        self.host = host
        self.port: int = self._server.server_port
        log.info("Prometheus metrics at http://%s:%d/metrics", host, self.port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

