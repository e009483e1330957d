"""ProcessorSubscription: the consume loop that feeds partition contexts and commits what completed."""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from strom.concurrency import AsyncRuntime
from strom.errors import ConfigError, UnknownTopicError
from strom.kafka import clients
from strom.kafka.security import AuthorizationError, refusal, security_settings
from strom.tasks.context import Record, record_of
from strom.tasks.metrics import PartitionMetricsSnapshot
from strom.tasks.partition import IgnoredKeys, PartitionContext
from strom.tasks.processors import ProcessorsBuilder
from strom.tasks.properties import (
    ProcessorProperties,
    ProcessorPropertiesView,
    PropertySupplier,
    StaticPropertySupplier,
)
from strom.tasks.quota import PerKeyQuota, PerKeyQuotaConfig
from strom.tasks.rate_limiter import PAUSED
from strom.tasks.retry import RETRY_PRODUCER_CONFIG, RetryConfig, RetryQueue

__all__ = [
    "CommitManager", "ProcessorSubscription", "StateListener", "SubscriptionBuilder", "SubscriptionState",
]

log = logging.getLogger(__name__)

PROPS = ProcessorProperties
_POLL_TIMEOUT_S = 0.05
_POLL_BATCH = 1000
_DRAIN_TICK_S = 0.005
TOPIC_PROPAGATION_S = 5.0

TP = tuple[str, int]


def _incremental(config: Mapping[str, Any]) -> bool:
    """Whether the group hands out partitions incrementally: the consumer protocol (KIP-848,
    ``group.protocol=consumer``) always does, the classic one with the cooperative-sticky assignor. The
    assign callback then gets only the added partitions, which must be added, not replace the rest."""
    return (str(config.get("group.protocol", "classic")).lower() == "consumer"
            or "cooperative-sticky" in str(config.get("partition.assignment.strategy", "")))


class CommitManager:
    """Commits the commit-ready offsets asynchronously every ``decaton.commit.interval.ms``."""

    def __init__(self, consumer: Consumer, contexts: dict[TP, PartitionContext],
                 props: ProcessorPropertiesView) -> None:
        self._consumer = consumer
        self._contexts = contexts
        self._interval = props.get(PROPS.COMMIT_INTERVAL_MS)
        self._last_commit = time.monotonic()
        self.in_flight = False

    def _ready(self, only: Iterable[TP] | None = None) -> list[TopicPartition]:
        keys = self._contexts.keys() if only is None else only
        return [TopicPartition(t, p, nxt) for (t, p) in keys
                if (ctx := self._contexts.get((t, p))) and (nxt := ctx.offset_waiting_commit()) is not None]

    def maybe_commit_async(self) -> None:
        now = time.monotonic()
        if now - self._last_commit < self._interval.value / 1000 or self.in_flight:
            return
        self._last_commit = now
        offsets = self._ready()
        if not offsets:
            return
        self.in_flight = True
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            self.in_flight = False
            log.warning("Async commit failed to start: %s", exc)

    def on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's commit callback (runs inside consume() on the subscription thread)."""
        self.in_flight = False
        if err is not None:
            log.warning("Offset commit failed: %s", err)
            return
        self._store(partitions)

    def _store(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            ctx = self._contexts.get((tp.topic, tp.partition))
            if ctx is not None and tp.error is None and tp.offset >= 0:
                ctx.committed_offset = max(ctx.committed_offset, tp.offset - 1)

    def commit_sync(self, only: Iterable[TP] | None = None) -> None:
        offsets = self._ready(only)
        if not offsets:
            return
        try:
            self._store(self._consumer.commit(offsets=offsets, asynchronous=False))
        except KafkaException as exc:
            log.warning("Offset commit failed (completed records will be processed again): %s", exc)


class SubscriptionState(enum.Enum):
    """Decaton's SubscriptionStateListener.State: where the subscription's consume loop is."""

    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    REBALANCING = "REBALANCING"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    TERMINATED = "TERMINATED"


StateListener = Callable[[SubscriptionState], None]


class ProcessorSubscription:
    """Consumes the topic (and its retry topic) in group ``group.id`` and processes records concurrently.

    Runs its own thread; ``close()`` stops fetching, drains in-flight tasks for up to
    ``decaton.processing.shutdown.timeout.ms``, commits what completed and closes the clients.
    """

    def __init__(self, subscription_id: str, builder: ProcessorsBuilder, props: ProcessorPropertiesView,
                 consumer_config: Mapping[str, Any], retry: RetryConfig | None,
                 state_listener: StateListener | None = None, quota: PerKeyQuotaConfig | None = None) -> None:
        config = dict(consumer_config)
        self._bootstrap = config.pop("bootstrap.servers", None)
        if not self._bootstrap:
            raise ConfigError("consumer_config needs 'bootstrap.servers' (where the Kafka broker listens).")
        config.setdefault("group.id", subscription_id)
        # the admin client and the retry and shaping producers reach the cluster as the consumer does
        self._settings = security_settings(config)
        for key in ("on_commit", "enable.auto.commit"):
            if key in config:
                raise ConfigError(f"consumer_config must not set {key!r}: the subscription commits the "
                                  "offsets of completed tasks itself.")
        self.subscription_id = subscription_id
        self._builder = builder
        self._props = props
        self._config = config
        self._incremental = _incremental(config)
        self._topics = [builder.topic]
        self._contexts: dict[TP, PartitionContext] = {}
        self._retry_queue: RetryQueue | None = None
        if retry is not None:
            self._retry_queue = self._start_retry(retry)
            self._topics.append(self._retry_queue.retry_topic)
        self._quota: PerKeyQuota | None = None
        if quota is not None:
            self._quota = PerKeyQuota(quota, builder.topic, self._bootstrap, props, self._settings)
            clients.create_topics(self._bootstrap, dict.fromkeys(self._quota.shaping_topics,
                                                                 self._partition_count(builder.topic)),
                                  settings=self._settings)
            self._topics += self._quota.shaping_topics
        self._ignored = IgnoredKeys(props)
        self._check_topics()
        self._runtime = AsyncRuntime(f"{subscription_id}-async") if builder.asynchronous else None
        self._terminated = threading.Event()
        self._error: BaseException | None = None
        self._state_listener = state_listener
        self.state = SubscriptionState.INITIALIZING

        # librdkafka calls on_commit inside consume() on the subscription thread
        def on_commit(err: KafkaError | None, partitions: list[TopicPartition]) -> None:
            self._commit_manager.on_commit(err, partitions)

        try:
            self._consumer = clients.consumer(self._bootstrap, **self._config, on_commit=on_commit)
        except BaseException:
            self._close_helpers()
            raise
        self._commit_manager = CommitManager(self._consumer, self._contexts, props)
        self._thread = threading.Thread(target=self._run, name=f"subscription-{subscription_id}", daemon=True)
        props.get(PROPS.PARTITION_CONCURRENCY).listen(self._on_concurrency_change)

    # ---- setup -----------------------------------------------------------------------------------
    def _partition_count(self, topic: str) -> int:
        # a topic created a moment ago may not be listed yet by the broker asked (a cluster's brokers
        # learn of it from the controller one after another): asked again for a few seconds
        admin = clients.admin(self._bootstrap, **self._settings)
        deadline = time.monotonic() + TOPIC_PROPAGATION_S
        while True:
            meta = admin.list_topics(topic, timeout=10).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                return len(meta.partitions)
            if meta is not None and meta.error is not None and (
                    refused := refusal(self._settings, meta.error, topic=topic, topic_operation="Describe")):
                raise refused
            if time.monotonic() >= deadline:
                raise UnknownTopicError(f"Topic {topic!r} does not exist: create it before subscribing "
                                        f"(e.g. with strom.kafka.clients.create_topics).")
            time.sleep(0.2)

    def _check_topics(self) -> None:
        for topic in self._topics:
            self._partition_count(topic)

    def _start_retry(self, config: RetryConfig) -> RetryQueue:
        topic = self._builder.topic
        partitions = self._partition_count(topic)
        clients.create_topics(self._bootstrap, {config.retry_topic_or_default(topic): partitions,
                                                config.dlq_topic_or_default(topic): 1},
                              settings=self._settings)
        producer = clients.producer(self._bootstrap, **self._settings, **RETRY_PRODUCER_CONFIG)
        return RetryQueue(producer, topic, config, self._props)

    def start(self) -> ProcessorSubscription:
        self._thread.start()
        return self

    def _set_state(self, state: SubscriptionState) -> None:
        ending = (SubscriptionState.SHUTTING_DOWN, SubscriptionState.TERMINATED)
        if state is self.state or (self.state in ending and state not in ending):
            return  # closing the consumer revokes its partitions: that is no rebalance
        self.state = state
        if self._state_listener is not None:
            try:
                self._state_listener(state)
            except Exception:  # a listener's bug must not stop consumption
                log.exception("%s: the state listener failed on %s", self.subscription_id, state.value)

    # ---- callbacks ------------------------------------------------------------------------------
    def _on_concurrency_change(self, _old: int, _new: int) -> None:
        for ctx in list(self._contexts.values()):
            ctx.reload_requested = True

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # librdkafka keeps a partition's pause flag across assignments: start every new one fetching
        if self._incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        consumer.resume(partitions)
        for tp in partitions:
            key = (tp.topic, tp.partition)
            if key not in self._contexts:
                self._contexts[key] = PartitionContext(tp.topic, tp.partition, self._builder, self._props,
                                                       self._runtime, self._retry_queue, self._ignored,
                                                       self._quota)
        log.info("%s: assigned %s", self.subscription_id, sorted(self._contexts))
        self._set_state(SubscriptionState.RUNNING)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._set_state(SubscriptionState.REBALANCING)
        keys = [(tp.topic, tp.partition) for tp in partitions if (tp.topic, tp.partition) in self._contexts]
        if not keys:
            return
        timeout_s = self._props.value(PROPS.GROUP_REBALANCE_TIMEOUT_MS) / 1000
        self._drain(keys, timeout_s)
        self._commit_manager.commit_sync(keys)
        self._drop(keys)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._set_state(SubscriptionState.REBALANCING)
        self._drop([(tp.topic, tp.partition) for tp in partitions])

    # ---- loop -----------------------------------------------------------------------------------
    def _run(self) -> None:
        consumer = self._consumer
        try:
            consumer.subscribe(self._topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                               on_lost=self._on_lost)
            self._loop(consumer)
        except BaseException as exc:
            self._error = exc
            log.exception("Subscription %s stopped on an error", self.subscription_id)
        finally:
            self._shutdown(consumer)

    def _loop(self, consumer: Consumer) -> None:
        while not self._terminated.is_set():
            batches: dict[TP, list[Record]] = {}
            for msg in consumer.consume(_POLL_BATCH, _POLL_TIMEOUT_S):
                err = msg.error()
                if err is not None:
                    if (refused := self._refusal(msg)) is not None:
                        raise refused
                    if not err.fatal():
                        log.warning("Consumer: %s", err)
                        continue
                    raise KafkaException(err)
                key = (msg.topic(), msg.partition())
                batch = batches.get(key)
                if batch is None:
                    batches[key] = [record_of(msg)]
                else:
                    batch.append(record_of(msg))
            for key, batch in batches.items():
                ctx = self._contexts.get(key)
                if ctx is not None:
                    ctx.add_records(batch)
            self._housekeeping(consumer)

    def _refusal(self, msg: Any) -> AuthorizationError | None:
        """A missing ACL, said once: librdkafka reports it as a consumer error and would go on asking."""
        return refusal(self._settings, msg.error(), topic=msg.topic() or ", ".join(self._topics),
                       group=self._config["group.id"])

    def _poll_producers(self) -> None:
        """Serves the delivery reports of retried and shaped tasks (they complete those tasks)."""
        for producer in (self._retry_queue, self._quota):
            if producer is not None:
                producer.poll()

    def _close_helpers(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
        for producer in (self._retry_queue, self._quota):
            if producer is not None:
                producer.flush(5.0)
        self._builder.close()

    def _housekeeping(self, consumer: Consumer) -> None:
        self._poll_producers()
        all_paused = self._props.value(PROPS.PROCESSING_RATE) == PAUSED
        pause, resume = [], []
        for (topic, partition), ctx in self._contexts.items():
            ctx.update()
            want = all_paused or ctx.should_pause()
            if want != ctx.paused:
                ctx.paused = want
                (pause if want else resume).append(TopicPartition(topic, partition))
        if pause:
            consumer.pause(pause)
        if resume:
            consumer.resume(resume)
        self._commit_manager.maybe_commit_async()

    def _drain(self, keys: list[TP], timeout_s: float) -> bool:
        """Waits until the tasks handed to processors in the given partitions completed, or the timeout
        passes. Fetched records not yet handed over are dropped: not committed, so fetched again."""
        deadline = time.monotonic() + timeout_s
        for key in keys:
            if key in self._contexts:
                self._contexts[key].drop_backlog()
        while True:
            self._poll_producers()
            contexts = [self._contexts[k] for k in keys if k in self._contexts]
            for ctx in contexts:
                ctx.update()
            if all(ctx.pending() == 0 for ctx in contexts):
                return True
            if time.monotonic() >= deadline:
                log.warning("%s: %d records still pending after %.1f s; they will be processed again",
                            self.subscription_id, sum(c.pending() for c in contexts), timeout_s)
                return False
            time.sleep(_DRAIN_TICK_S)

    def _drop(self, keys: list[TP]) -> None:
        for key in keys:
            ctx = self._contexts.pop(key, None)
            if ctx is not None:
                ctx.close()

    def _shutdown(self, consumer: Consumer) -> None:
        self._set_state(SubscriptionState.SHUTTING_DOWN)
        try:
            keys = list(self._contexts)
            if keys and self._error is None:
                consumer.pause([TopicPartition(t, p) for t, p in keys])
                self._drain(keys, self._props.value(PROPS.SHUTDOWN_TIMEOUT_MS) / 1000)
                self._commit_manager.commit_sync(keys)
            self._drop(keys)
        finally:
            consumer.close()
            self._close_helpers()
            self._set_state(SubscriptionState.TERMINATED)
            self._terminated.set()

    # ---- public ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Graceful shutdown: stop fetching, drain, commit, close. Raises what stopped the loop, if any."""
        self._terminated.set()
        if self._thread.ident is None:  # built but never started: only the clients to release
            self._consumer.close()
            self._close_helpers()
        elif self._thread.is_alive():
            self._thread.join()
        if self._error is not None and not isinstance(self._error, KeyboardInterrupt):
            raise self._error

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def metrics(self) -> list[PartitionMetricsSnapshot]:
        """A snapshot per assigned partition."""
        return [ctx.snapshot() for ctx in list(self._contexts.values())]

    def __enter__(self) -> ProcessorSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SubscriptionBuilder:
    """``SubscriptionBuilder.new_builder(id).processors_builder(...).consumer_config(...).build_and_start()``."""

    def __init__(self, subscription_id: str) -> None:
        self._id = subscription_id
        self._builder: ProcessorsBuilder | None = None
        self._suppliers: list[PropertySupplier] = []
        self._consumer_config: dict[str, Any] = {}
        self._retry: RetryConfig | None = None
        self._quota: PerKeyQuotaConfig | None = None
        self._state_listener: StateListener | None = None

    @classmethod
    def new_builder(cls, subscription_id: str) -> SubscriptionBuilder:
        return cls(subscription_id)

    def processors_builder(self, builder: ProcessorsBuilder) -> SubscriptionBuilder:
        self._builder = builder
        return self

    def properties(self, *suppliers: PropertySupplier | Mapping[str, Any]) -> SubscriptionBuilder:
        """Property suppliers in priority order; a dict is a static supplier."""
        for supplier in suppliers:
            if isinstance(supplier, Mapping):
                supplier = StaticPropertySupplier(supplier)
            self._suppliers.append(supplier)
        return self

    def consumer_config(self, config: Mapping[str, Any]) -> SubscriptionBuilder:
        self._consumer_config = dict(config)
        return self

    def enable_retry(self, config: RetryConfig | None = None) -> SubscriptionBuilder:
        """Lets processors call ``context.retry()`` (Decaton's enableRetry): the task goes to
        ``<topic>-retry`` and is processed again after ``config.backoff_ms`` (default 1 s). Creates that
        topic and the dead letter topic ``<topic>-dlq`` (strom's extension) if they do not exist."""
        self._retry = config or RetryConfig.with_backoff(1000)
        return self

    def enable_per_key_quota(self, config: PerKeyQuotaConfig) -> SubscriptionBuilder:
        """Decaton's per-key quota: tasks of a key over ``decaton.per.key.quota.processing.rate`` go to the
        shaping topics (``PerKeyQuotaConfig.shape()``: ``<topic>-shaping``, created if missing), which the
        subscription consumes at that rate per partition. Per-key order does not hold for shaped keys."""
        self._quota = config
        return self

    def state_listener(self, listener: StateListener) -> SubscriptionBuilder:
        """``listener(state)`` on each SubscriptionState change, on the subscription's thread."""
        self._state_listener = listener
        return self

    def build(self) -> ProcessorSubscription:
        if self._builder is None:
            raise ConfigError("No processors: call processors_builder(ProcessorsBuilder.consuming(...)).")
        self._builder.validate()
        return ProcessorSubscription(self._id, self._builder, ProcessorPropertiesView(self._suppliers),
                                     self._consumer_config, self._retry, self._state_listener, self._quota)

    def build_and_start(self) -> ProcessorSubscription:
        return self.build().start()
