"""What a running SparkStreams application does, for ``strom run``'s status line and a Prometheus
endpoint: read only through SparkStreams' public API (``state``, ``progress``, ``plan``) and the
application's committed offsets (group ``application.id``).

Metric names are those the Prometheus JMX exporter gives Kafka Streams' and Kafka consumers' own
metrics, so dashboards built for Kafka Streams find them (docs/deploy.md#metrics). The endpoint runs
when ``metrics.prometheus.port`` is set (0 picks a free port; ``SparkStreams.metrics_url`` says which).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from strom.errors import ConfigError
from strom.kafka import clients, offsets
from strom.prometheus import MetricsServer
from strom.streams import config as cfg

__all__ = [
    "METRICS_HOST", "METRICS_PORT", "StatusReader", "StreamsCollector", "StreamsStatus", "TaskStatus",
    "optional_port", "serve_if_configured",
]

if TYPE_CHECKING:
    from strom.spark.runtime.spark_streams import SparkStreams

log = logging.getLogger(__name__)

METRICS_PORT = "metrics.prometheus.port"
METRICS_HOST = "metrics.prometheus.host"


def optional_port(key: str, value: Any) -> int | None:
    """A config value that is a TCP port or None (unset: off)."""
    if value is None:
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if isinstance(value, bool) or not 0 <= port <= 65535:
        raise ConfigError.bad_value(key, value, "a TCP port (0 picks a free one)")
    return port


cfg.register(METRICS_PORT, None, optional_port)
cfg.register(METRICS_HOST, "127.0.0.1", lambda key, value: str(value))


@dataclass(frozen=True)
class TaskStatus:
    """One stream task since ``start()``: ``lag`` is records of its partitions not yet committed."""

    task_id: str
    records: int
    rate: float
    commits: int
    commit_latency_avg_ms: float
    restored: int
    lag: int


@dataclass(frozen=True)
class StreamsStatus:
    application_id: str
    state: str
    tasks: dict[str, TaskStatus]
    lag_by_partition: dict[tuple[str, str, int], int]
    """(task id, topic, partition) -> records not committed yet."""
    lag_by_subtopology: dict[int, int]
    last_commit_age_s: float | None
    standby_lags: dict[tuple[str, str], int] = field(default_factory=dict)
    """(task id, stream thread) -> changelog records a standby of the task had not applied."""

    @property
    def records(self) -> int:
        return sum(t.records for t in self.tasks.values())

    @property
    def rate(self) -> float:
        return sum(t.rate for t in self.tasks.values())


class StatusReader:
    """Samples an application; rates are over the time since the previous ``read()``."""

    def __init__(self, app: SparkStreams) -> None:
        self._app = app
        self._admin: Any = None
        self._previous: tuple[float, dict[str, int]] | None = None

    def read(self) -> StreamsStatus:
        app = self._app
        now = time.monotonic()
        progress = app.progress
        tasks = dict(progress.tasks)
        counts = {task_id: t.records for task_id, t in tasks.items()}
        before_time, before = self._previous or (now, counts)
        elapsed = now - before_time
        self._previous = (now, counts)
        lags = self._lags()
        by_task: dict[str, int] = {}
        for (task_id, _, _), lag in lags.items():
            by_task[task_id] = by_task.get(task_id, 0) + lag
        statuses = {
            task_id: TaskStatus(
                task_id, t.records,
                (t.records - before.get(task_id, 0)) / elapsed if elapsed > 0 else 0.0,
                t.commits, _commit_latency_ms(t), t.restored, by_task.get(task_id, 0))
            for task_id, t in sorted(tasks.items())
        }
        for task_id in by_task.keys() - statuses.keys():  # planned, not run yet
            statuses[task_id] = TaskStatus(task_id, 0, 0.0, 0, 0.0, 0, by_task[task_id])
        by_sub: dict[int, int] = {}
        for task_id, lag in by_task.items():
            sub = int(task_id.split("_")[0])
            by_sub[sub] = by_sub.get(sub, 0) + lag
        last_commit = progress.last_commit
        standbys = {(standby.task, standby.thread): standby.lag for standby in progress.standbys.values()}
        return StreamsStatus(app.config.application_id, app.state.value, statuses, lags, by_sub,
                             None if last_commit is None else now - last_commit, standbys)

    def _lags(self) -> dict[tuple[str, str, int], int]:
        plan = self._app.plan
        if plan is None:
            return {}
        owners = {(t, p): f"{sub.id}_{p}" for sub in plan.subtopologies
                  for t, n in sub.source_topics.items() for p in range(n)}
        if self._admin is None:
            config = self._app.config
            self._admin = clients.admin(self._app.bootstrap_servers, **config.client_props("admin."))
        found = offsets.group_offsets(self._admin, self._app.config.application_id, owners)
        return {(owners[tp], *tp): o.lag for tp, o in found.items()}


class StreamsCollector(Collector):
    """Prometheus collector reading a StatusReader at every scrape."""

    def __init__(self, reader: StatusReader) -> None:
        self._reader = reader

    def collect(self) -> Iterator[Any]:
        status = self._reader.read()
        app = status.application_id
        state = GaugeMetricFamily("kafka_streams_stream_metrics_state",
                                  "1 for the application's current state (Kafka Streams' client state)",
                                  labels=["application_id", "state"])
        state.add_metric([app, status.state], 1)
        yield state
        per_task = ["application_id", "task_id"]
        families = [
            (CounterMetricFamily("kafka_streams_stream_task_metrics_process",
                                 "input records processed by the task", labels=per_task),
             lambda t: t.records),
            (GaugeMetricFamily("kafka_streams_stream_task_metrics_process_rate",
                               "input records per second since the previous scrape", labels=per_task),
             lambda t: t.rate),
            (CounterMetricFamily("kafka_streams_stream_task_metrics_commit",
                                 "commits of the task", labels=per_task),
             lambda t: t.commits),
            (GaugeMetricFamily("kafka_streams_stream_task_metrics_commit_latency_avg",
                               "average ms of a commit (micro-batch: of a task batch, through its commit)",
                               labels=per_task),
             lambda t: t.commit_latency_avg_ms),
            (CounterMetricFamily("kafka_streams_stream_state_metrics_restore",
                                 "records restored into the task's stores from changelogs", labels=per_task),
             lambda t: t.restored),
        ]
        for family, value in families:
            for task in status.tasks.values():
                family.add_metric([app, task.task_id], value(task))
            yield family
        lag = GaugeMetricFamily("kafka_consumer_consumer_fetch_manager_metrics_records_lag",
                                "records of the partition not committed by the application yet",
                                labels=["application_id", "task_id", "topic", "partition"])
        for (task_id, topic, partition), records in sorted(status.lag_by_partition.items()):
            lag.add_metric([app, task_id, topic, str(partition)], records)
        yield lag
        standby = GaugeMetricFamily("strom_standby_task_lag",
                                    "changelog records a standby replica of the task had not applied at its "
                                    "last update", labels=["application_id", "task_id", "thread"])
        for (task_id, thread), records in sorted(status.standby_lags.items()):
            standby.add_metric([app, task_id, thread], records)
        yield standby


def serve_if_configured(app: SparkStreams) -> MetricsServer | None:
    """The application's endpoint when ``metrics.prometheus.port`` is set (called by ``start()``)."""
    port = app.config[METRICS_PORT]
    if port is None:
        return None
    return MetricsServer([StreamsCollector(StatusReader(app))], port, app.config[METRICS_HOST])


def _commit_latency_ms(task: Any) -> float:
    """Real-time: the average commit (caches flushed, transaction committed, stores written); micro-batch:
    the average task batch, processing through commit (the only figure a micro-batch has)."""
    if task.commit_millis and task.commits:
        return task.commit_millis / task.commits
    return task.millis / task.batches if task.batches else 0.0
