"""One assigned partition: its units, commit control, rate limiter, backlog and metrics."""

from __future__ import annotations

import logging
import operator
from collections import deque

from strom.concurrency import AsyncRuntime, KeyOrderedExecutor
from strom.kafka.headers import Headers
from strom.tasks.commit_control import OutOfOrderCommitControl
from strom.tasks.context import HEADERS, KEY, OFFSET, TIMESTAMP, VALUE, ConsumedRecord, Record
from strom.tasks.metrics import PartitionMetrics, PartitionMetricsSnapshot
from strom.tasks.processors import ProcessorsBuilder, ProcessPipeline
from strom.tasks.properties import ProcessorProperties, ProcessorPropertiesView
from strom.tasks.quota import PerKeyQuota
from strom.tasks.rate_limiter import RateLimiter
from strom.tasks.retry import RetryQueue

__all__ = ["IgnoredKeys", "PartitionContext"]

log = logging.getLogger(__name__)

PROPS = ProcessorProperties
_record_key = operator.itemgetter(KEY)
_record_offset = operator.itemgetter(OFFSET)


class IgnoredKeys:
    """``decaton.ignore.keys`` as record keys (UTF-8), kept current as the property changes."""

    def __init__(self, props: ProcessorPropertiesView) -> None:
        prop = props.get(PROPS.IGNORE_KEYS)
        self.keys = self._encode(prop.value)
        prop.listen(lambda _old, new: setattr(self, "keys", self._encode(new)))

    @staticmethod
    def _encode(keys: tuple[str, ...]) -> frozenset[bytes]:
        return frozenset(key.encode() for key in keys)


class PartitionContext:
    """Feeds fetched records of one partition to ``decaton.partition.concurrency`` key-ordered units.

    Records wait in a backlog while ``decaton.max.pending.records`` are pending or a concurrency change is
    rebuilding the units. The partition is paused during a rebuild and once the backlog holds
    ``decaton.max.pending.records`` too, and resumed when half of that is left: librdkafka drops what it
    prefetched for a partition it pauses and fetches it again on resume (hundreds of ms), so pausing at
    every overshoot of the pending limit left the units without work. All methods run on the subscription
    thread.
    """

    def __init__(self, topic: str, partition: int, builder: ProcessorsBuilder, props: ProcessorPropertiesView,
                 runtime: AsyncRuntime | None, retry_queue: RetryQueue | None, ignored: IgnoredKeys,
                 quota: PerKeyQuota | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self._props = props
        self._max_pending = props.get(PROPS.MAX_PENDING_RECORDS)
        self._runtime = runtime
        self._ignored = ignored
        self._quota = quota
        self._quota_manager = None if quota is None else quota.manager(topic)
        self.commit_control = OutOfOrderCommitControl()
        self.metrics = PartitionMetrics()
        shaping = quota is not None and topic in quota.shaping_topics
        rate = PROPS.PER_KEY_QUOTA_PROCESSING_RATE if shaping else PROPS.PROCESSING_RATE
        limiter = RateLimiter(props.get(rate))
        self._pipeline = ProcessPipeline(topic, partition, builder, props, limiter, retry_queue,
                                         self.commit_control, self.metrics)
        self._executor = self._new_executor()
        self._backlog: deque[Record] = deque()
        self.reload_requested = False
        self.paused = False
        self.committed_offset = -1
        self._latest_fetched = -1

    def _new_executor(self) -> KeyOrderedExecutor:
        concurrency = self._props.value(PROPS.PARTITION_CONCURRENCY)
        handler = self._pipeline.handle_async if self._pipeline.asynchronous else self._pipeline.handle
        return KeyOrderedExecutor(handler, concurrency, runtime=self._runtime,
                                  name=f"{self.topic}-{self.partition}")

    @property
    def concurrency(self) -> int:
        return self._executor.concurrency

    def pending(self) -> int:
        """Offsets fetched and handed to processors whose completion was not yet committed."""
        return self.commit_control.pending_count()

    def add_records(self, records: list[Record]) -> None:
        """Takes records of this partition in fetch order; those over the pending limit wait (backlog)."""
        if self.committed_offset < 0:
            self.committed_offset = records[0][OFFSET] - 1
        self._latest_fetched = records[-1][OFFSET]
        if self._backlog or self.reload_requested:
            self._backlog.extend(records)
            return
        room = max(0, self._max_pending.value - self.commit_control.pending_count())
        if room < len(records):
            self._backlog.extend(records[room:])
            records = records[:room]
        self._dispatch(records)

    def _dispatch(self, records: list[Record]) -> None:
        """Hands records to the units: the units get the records themselves (each builds its TaskRequest
        when it starts one), the commit control only their offsets. Records of ignored keys complete at once,
        those of keys over their quota once stored in the shaping topic."""
        self.commit_control.report_fetched_offsets([record[OFFSET] for record in records])
        if self._ignored.keys or self._quota_manager is not None:
            records = self._admit(records)
        self._executor.submit_many(records, _record_key)

    def _admit(self, records: list[Record]) -> list[Record]:
        ignored, manager, complete = self._ignored.keys, self._quota_manager, self.commit_control.complete
        admitted = []
        for record in records:
            key = record[KEY]
            if key in ignored:
                complete(record[OFFSET])
            elif manager is not None and (rate := manager.record(key)) is not None:
                consumed = ConsumedRecord(self.topic, self.partition, record[OFFSET], record[TIMESTAMP], key,
                                          record[VALUE], Headers(record[HEADERS]))
                self._quota.shape(consumed, rate, lambda offset=record[OFFSET]: complete(offset))  # type: ignore[union-attr]
            else:
                admitted.append(record)
        return admitted

    def update(self) -> None:
        """Advances the commit-ready offset, rebuilds units on a concurrency change, releases the backlog."""
        self.metrics.completed += self.commit_control.update_high_watermark(
            self._props.value(PROPS.DEFERRED_COMPLETE_TIMEOUT_MS))
        if self.reload_requested:
            self._advance_rebuild()
        backlog = self._backlog
        if backlog and not self.reload_requested:
            room = min(len(backlog), self._max_pending.value - self.commit_control.pending_count())
            if room > 0:
                self._dispatch([backlog.popleft() for _ in range(room)])
        self.metrics.update_starvation(self.pending())

    def _advance_rebuild(self) -> None:
        """A concurrency change: old units finish their current task and hand back the queued ones,
        which go to the new units in offset order (so per-key order holds and nothing runs twice)."""
        old = self._executor
        old.hand_back()
        if not old.idle():
            return
        requeued = sorted(old.handed_back(), key=_record_offset)
        old.close(timeout_s=0.0)
        self._executor = self._new_executor()
        self.reload_requested = False
        self._executor.submit_many(requeued, _record_key)
        log.info("%s-%d: units rebuilt with concurrency %d (was %d), %d queued tasks moved", self.topic,
                 self.partition, self._executor.concurrency, old.concurrency, len(requeued))

    def drop_backlog(self) -> None:
        """Forgets fetched records not yet handed to processors (on revoke and shutdown)."""
        self._backlog.clear()

    def should_pause(self) -> bool:
        """Whether the partition is to be paused (class docstring); ``paused`` says whether it is now."""
        if self.reload_requested:
            return True
        limit = self._max_pending.value
        return len(self._backlog) > limit // 2 if self.paused else len(self._backlog) >= limit

    def offset_waiting_commit(self) -> int | None:
        """The next offset to commit (last completed + 1, Kafka's convention) if it moved since."""
        ready = self.commit_control.commit_ready_offset()
        return ready + 1 if ready > self.committed_offset else None

    def close(self) -> None:
        """Stops the units; queued records are dropped (their offsets are not committed)."""
        self._backlog.clear()
        self._executor.close(discard_queued=True, timeout_s=0.5)
        self._pipeline.close()

    def snapshot(self) -> PartitionMetricsSnapshot:
        p50, p99, pmax = self.metrics.latency_percentiles_ms()
        lag = max(0, self._latest_fetched - self.committed_offset)
        return PartitionMetricsSnapshot(
            self.topic, self.partition, self.pending() + len(self._backlog), self.metrics.completed,
            self.metrics.queue_starved_s(), p50, p99, pmax, lag, self.committed_offset, self.paused,
            self.concurrency)
