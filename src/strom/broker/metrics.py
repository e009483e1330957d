"""The broker's Prometheus metrics: requests per API, bytes in and out, topics and partitions, groups,
transactions. Counters are bumped by the connection handler (two calls per request); the rest is read
from the broker's state when scraped. Names are those the Prometheus JMX exporter gives Kafka's broker
metrics (``kafka_network_requestmetrics_requests_total``, ``kafka_server_brokertopicmetrics_...``), so
dashboards for Kafka find them; ``strom broker --metrics-port`` serves them (docs/deploy.md#metrics)."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kio.index import load_request_schema
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from strom.broker.handlers import REGISTRY

if TYPE_CHECKING:
    from strom.broker.broker import Broker


@functools.cache
def _api_name(api_key: int) -> str:
    """Kafka's request name (``Produce``, ``Fetch``, ...); the number of an API the broker does not serve."""
    handler = REGISTRY.get(api_key)
    if handler is None:
        return str(api_key)
    return load_request_schema(api_key, handler.min_version).__name__.removesuffix("Request")


class BrokerMetrics:
    """Request counters, updated on the broker's event loop and read by the metrics thread."""

    def __init__(self) -> None:
        self.requests: Counter[int] = Counter()
        self.bytes_in = 0
        self.bytes_out = 0

    def request(self, api_key: int, size: int) -> None:
        self.requests[api_key] += 1
        self.bytes_in += size

    def response(self, response: Any) -> None:
        """``response``: encoded bytes, an EncodedResponse (its parts, file ranges by length) or None."""
        if response is None:
            return
        parts = getattr(response, "parts", None)
        if parts is None:
            self.bytes_out += len(response)
        else:
            self.bytes_out += sum(getattr(part, "length", None) or len(part) for part in parts)


class BrokerCollector(Collector):
    """Reads a running Broker at every scrape."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def collect(self) -> Iterator[Any]:
        broker, counts = self._broker, self._broker.metrics
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "requests received, by API", labels=["request"])
        for api_key, count in sorted(dict(counts.requests).items()):
            requests.add_metric([_api_name(api_key)], count)
        yield requests
        yield CounterMetricFamily("kafka_server_brokertopicmetrics_bytesin",
                                  "request bytes received", value=counts.bytes_in)
        yield CounterMetricFamily("kafka_server_brokertopicmetrics_bytesout",
                                  "response bytes sent", value=counts.bytes_out)
        topics = list(broker.logs.topics.values())
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_globaltopiccount", "topics",
                                value=len(topics))
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "partitions",
                                value=sum(len(t.partitions) for t in topics))
        groups = list(broker.groups.groups.values())
        yield GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                                "consumer groups known to the coordinator", value=len(groups))
        transactions = GaugeMetricFamily("kafka_coordinator_transaction_transactions",
                                         "transactional ids by state", labels=["state"])
        states = Counter(t.state.name for t in broker.transactions.coordinator.list_transactions())
        for state, count in sorted(states.items()):
            transactions.add_metric([state], count)
        yield transactions
