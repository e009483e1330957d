"""Driver-side view of the source topics: which partitions exist and their earliest/latest offsets.

"Latest" honours the isolation level: under read_committed it is the last stable offset, so a
batch never waits for records of a transaction that is still open.
"""

from __future__ import annotations

import logging
import re
import time

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from strom.errors import BrokerUnavailableError, ConfigError, UnknownTopicError
from strom.kafka import clients
from strom.kafka.clients import CONNECT_AT_ONCE
from strom.spark.connector.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SourceOptions,
    TopicPartitionOffsets,
)

__all__ = ["DriverMetadata", "TopicMetadata", "TopicPartitionKey"]

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
_TIMEOUT = 30.0
_RETRY_S = 10.0
"""How long a partition whose offsets cannot be listed for a passing reason (``_passing``) is asked again."""
_RETRY_BACKOFF_S = 0.1
_PASSING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
            KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TIMED_OUT,
            KafkaError._NOENT, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH}
"""``_NOENT``: librdkafka's "No leaders found", for partitions whose leader it does not know yet; the
leader epochs: a node that has not yet learnt the partition's newest leader."""


class DriverMetadata:
    """For stream readers: a TopicMetadata built on first use on the driver; executors get the reader
    pickled without it (an admin client neither pickles nor is needed there)."""

    _options: SourceOptions
    _metadata_client: TopicMetadata | None = None

    @property
    def _metadata(self) -> TopicMetadata:
        if self._metadata_client is None:
            self._metadata_client = TopicMetadata(self._options)
        return self._metadata_client

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_metadata_client": None}


class TopicMetadata:
    """Resolves the subscription to topic partitions and looks up their offsets (one admin client)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._admin = clients.admin(options.bootstrap_servers,
                                    **{**CONNECT_AT_ONCE, **_admin_config(options.client_config)})
        self._isolation = (IsolationLevel.READ_COMMITTED if options.read_committed
                           else IsolationLevel.READ_UNCOMMITTED)

    def topic_partitions(self) -> list[TopicPartitionKey]:
        """The partitions the subscription covers now; unknown topics raise, naming the option."""
        try:
            cluster = self._admin.list_topics(timeout=_TIMEOUT)
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"Could not read topic metadata from kafka.bootstrap.servers="
                f"{self._options.bootstrap_servers!r}: {exc}. Check that the broker is running."
            ) from exc
        existing = {name: sorted(meta.partitions) for name, meta in cluster.topics.items()
                    if meta.error is None}
        subscription = self._options.subscription
        if subscription.pattern is not None:
            regex = re.compile(subscription.pattern)
            return [(t, p) for t in sorted(existing) if regex.fullmatch(t) for p in existing[t]]
        if subscription.assigned:
            missing = [tp for tp in subscription.assigned if tp[1] not in existing.get(tp[0], [])]
            if missing:
                hidden = sorted({topic for topic, _ in missing})
                clients.check_described(self._admin, hidden, self._options.client_config)
                raise UnknownTopicError(
                    f"Option 'assign' names partitions that do not exist: "
                    f"{', '.join(f'{t}-{p}' for t, p in missing)}. Create the topics or fix 'assign'."
                )
            return list(subscription.assigned)
        unknown = [t for t in subscription.topics if t not in existing]
        if unknown:
            # hidden from this principal (a listing leaves them out): its missing Describe ACL is said
            clients.check_described(self._admin, unknown, self._options.client_config)
            raise UnknownTopicError(
                f"Option 'subscribe' names unknown topics {unknown} at "
                f"{self._options.bootstrap_servers}. Create them first (e.g. `strom topics create`) "
                "or fix the names."
            )
        return [(t, p) for t in subscription.topics for p in existing[t]]

    def earliest(self, partitions: list[TopicPartitionKey]) -> TopicPartitionOffsets:
        return self._list_offsets(partitions, KafkaOffsetSpec.earliest())

    def latest(self, partitions: list[TopicPartitionKey]) -> TopicPartitionOffsets:
        return self._list_offsets(partitions, KafkaOffsetSpec.latest())

    def resolve(self, name: str, spec: OffsetSpec, partitions: list[TopicPartitionKey]
                ) -> TopicPartitionOffsets:
        """Turns ``spec`` into concrete offsets; partitions the JSON leaves out take its default."""
        stray = sorted(set(spec.per_partition) - set(partitions))
        if stray:
            raise ConfigError(
                f"Option {name!r} names partitions outside the subscription "
                f"({self._options.subscription.describe()}): {', '.join(f'{t}-{p}' for t, p in stray)}."
            )
        wanted = {tp: spec.per_partition.get(tp, spec.default) for tp in partitions}
        earliest = self.earliest([tp for tp, o in wanted.items() if o == EARLIEST])
        latest = self.latest([tp for tp, o in wanted.items() if o == LATEST])
        return {tp: earliest.get(tp, latest.get(tp, offset)) for tp, offset in wanted.items()}

    def _list_offsets(self, partitions: list[TopicPartitionKey], spec: KafkaOffsetSpec
                      ) -> TopicPartitionOffsets:
        if not partitions:
            return {}
        found: TopicPartitionOffsets = {}
        wanted = list(partitions)
        deadline = time.monotonic() + _RETRY_S
        while True:
            futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in wanted},
                                               isolation_level=self._isolation, request_timeout=_TIMEOUT)
            failed: dict[TopicPartitionKey, KafkaException] = {}
            for tp, future in futures.items():
                try:
                    found[(tp.topic, tp.partition)] = future.result().offset
                except KafkaException as exc:
                    failed[(tp.topic, tp.partition)] = exc
            if not failed:
                return found
            lasting = [exc for exc in failed.values() if not _passing(exc)]
            error = (lasting or list(failed.values()))[0]
            if lasting or time.monotonic() >= deadline:
                raise BrokerUnavailableError(
                    f"Could not list offsets of {len(failed)} partitions at "
                    f"{self._options.bootstrap_servers}: {error}. Check that the broker is running."
                ) from error
            log.debug("Listing offsets of %d partitions: %s (asking again)", len(failed), error)
            wanted = list(failed)
            time.sleep(_RETRY_BACKOFF_S)


def _passing(exc: KafkaException) -> bool:
    """An error that goes away by itself: a partition's leader not known yet or moving (a topic just
    created: a cluster's nodes learn its leaders one after another, the client its metadata), a timeout."""
    error = exc.args[0]
    return error.retriable() or error.code() in _PASSING


def _admin_config(client_config: dict[str, str]) -> dict[str, str]:
    """Consumer-only keys (isolation.level, fetch.*) would only make the admin client warn."""
    consumer_only = ("isolation.level", "fetch.", "max.poll", "session.timeout", "heartbeat",
                     "queued.", "max.partition.fetch", "check.crcs", "partition.assignment")
    return {k: v for k, v in client_config.items() if not k.startswith(consumer_only)}
