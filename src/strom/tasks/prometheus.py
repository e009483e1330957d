"""Prometheus metrics of a running ProcessorSubscription, named as Decaton's Micrometer metrics appear in
Prometheus (``decaton_tasks_processed_total``, ``decaton_offset_latest_committed``, ...), labelled by
subscription, topic and partition; read from ``subscription.metrics()`` at every scrape.
``strom tasks run --metrics-port`` serves them (docs/deploy.md#metrics)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from strom.tasks.metrics import PartitionMetricsSnapshot
from strom.tasks.subscription import ProcessorSubscription

__all__ = ["SubscriptionCollector"]

_LABELS = ["subscription", "topic", "partition"]
_Value = Callable[[PartitionMetricsSnapshot], float]
_FAMILIES: tuple[tuple[type, str, str, _Value], ...] = (
    (CounterMetricFamily, "decaton_tasks_processed", "tasks completed", lambda s: s.completed),
    (GaugeMetricFamily, "decaton_tasks_pending", "tasks fetched and not completed (the partition's queue)",
     lambda s: s.pending),
    (GaugeMetricFamily, "decaton_offset_latest_committed",
     "the partition's committed offset: the next record to process (Kafka's convention)",
     lambda s: s.committed_offset + 1),
    (GaugeMetricFamily, "decaton_offset_commit_lag", "fetched records not committed yet",
     lambda s: s.commit_lag),
    (GaugeMetricFamily, "decaton_partition_paused", "1 while the partition is paused (too many pending)",
     lambda s: int(s.paused)),
    (CounterMetricFamily, "decaton_partition_queue_starved_time_seconds",
     "time the partition had no task to process", lambda s: s.queue_starved_s),
    (GaugeMetricFamily, "decaton_partition_concurrency", "processing units (decaton.partition.concurrency)",
     lambda s: s.concurrency),
)


class SubscriptionCollector(Collector):
    def __init__(self, subscription: ProcessorSubscription) -> None:
        self._subscription = subscription

    def collect(self) -> Iterator[Any]:
        snapshots = self._subscription.metrics()
        name = self._subscription.subscription_id
        for kind, metric, documentation, value in _FAMILIES:
            family = kind(metric, documentation, labels=_LABELS)
            for s in snapshots:
                family.add_metric([name, s.topic, str(s.partition)], value(s))
            yield family
        durations = GaugeMetricFamily("decaton_tasks_process_duration_seconds",
                                      "task processing time over the latest tasks, by quantile",
                                      labels=[*_LABELS, "quantile"])
        for s in snapshots:
            quantiles = (("0.5", s.latency_p50_ms), ("0.99", s.latency_p99_ms), ("1.0", s.latency_max_ms))
            for quantile, ms in quantiles:
                durations.add_metric([name, s.topic, str(s.partition), quantile], ms / 1000)
        yield durations
