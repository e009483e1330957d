"""TopologyTestDriver: runs a topology deterministically in-process, without a broker or Spark.

As Kafka Streams' driver does, it creates one task per sub-topology (partition 0), pipes each input
record through depth-first, feeds records written to repartition topics back into the tasks that read
them, and commits after every record it processes (so caches flush after each record). With
``commit_per_record=False`` it commits only every ``commit.interval.ms`` of driver wall-clock time
(``advance_wall_clock_time``), when a processor asks, or on ``commit()``/``close()``: that is how a test
observes the record cache at work.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from strom.errors import InvalidStateStoreError, TopologyError, UnknownTopicError
from strom.streams import config as cfg
from strom.streams.processor.api import Headers
from strom.streams.processor.internals.collector import RecordCollector
from strom.streams.processor.internals.global_state import GlobalStateStores
from strom.streams.processor.internals.partition_group import RecordQueue
from strom.streams.processor.internals.ready_queues import ReadyQueues
from strom.streams.processor.internals.task import StreamTask
from strom.streams.processor.records import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.topology import Topology
from strom.streams.query.evaluate import TaskStores, answer
from strom.streams.query.requests import Position, StateQueryRequest, StateQueryResult
from strom.streams.state.cache import ThreadCache
from strom.streams.state.internals.metered import (
    MeteredTimestampedKeyValueStore,
    MeteredVersionedKeyValueStore,
)
from strom.streams.state.timestamped import ValueAndTimestamp

DRIVER_APPLICATION_ID = "topology-test-driver"


@dataclass(frozen=True)
class TestRecord:
    key: Any
    value: Any
    timestamp: int | None = None
    headers: Headers = ()

    __test__ = False  # not a pytest test class


@dataclass
class _Produced:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers


class _DriverSink:
    """Keeps every produced record per topic (offsets are list positions) and routes internal topics."""

    def __init__(self, driver: TopologyTestDriver) -> None:
        self.driver = driver

    def send(
        self,
        collector: RecordCollector,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
    ) -> None:
        log = self.driver.produced.setdefault(topic, [])
        record = _Produced(partition or 0, len(log), key, value, timestamp, tuple(headers))
        log.append(record)
        collector.delivered(topic, record.partition, record.offset)
        self.driver.route(topic, record)

    def flush(self, collector: RecordCollector) -> None:
        """Delivery is synchronous here."""

    def partition_count(self, topic: str) -> int:
        """The driver's topics have one partition (a StreamPartitioner is asked with 1)."""
        return 1


def to_millis(value: int | datetime | timedelta) -> int:
    """Milliseconds from an int (already ms), an aware or naive-UTC datetime, or a timedelta."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


class TopologyTestDriver:
    __test__ = False

    def __init__(
        self,
        topology: Topology,
        props: Mapping[str, Any] | None = None,
        initial_wall_clock_time: int | datetime = 0,
        commit_per_record: bool = True,
    ) -> None:
        props = dict(props or {})
        props.setdefault(cfg.APPLICATION_ID, DRIVER_APPLICATION_ID)
        self._own_state_dir = cfg.STATE_DIR not in props
        if self._own_state_dir:
            props[cfg.STATE_DIR] = tempfile.mkdtemp(prefix="strom-test-driver-")
        self.config = cfg.StreamsConfig(props)
        topology.check_config(self.config)
        self.builder = topology.internal
        self.builder.application_id = self.config.application_id
        self.commit_per_record = commit_per_record
        self.wall_clock_ms = to_millis(initial_wall_clock_time)
        self.stream_time = -1
        """The highest record timestamp any task read: STREAM_TIME punctuations of every task follow it."""
        self._last_commit_ms = self.wall_clock_ms
        self.produced: dict[str, list[_Produced]] = {}
        self._outputs: dict[str, deque[_Produced]] = {}
        self._input_offsets: dict[str, int] = {}
        self.cache = ThreadCache(self.config[cfg.STATESTORE_CACHE_MAX_BYTES])
        self.tasks: list[StreamTask] = []
        self._task_by_topic: dict[str, StreamTask] = {}
        self._ready = ReadyQueues()  # the queues with records, over all tasks, in Kafka's driver's order
        self._processing: RecordQueue | None = None
        self._closed = False
        sink = _DriverSink(self)
        self.global_state = GlobalStateStores(
            self.builder.global_stores,
            self.config,
            Path(self.config[cfg.STATE_DIR]) / self.config.application_id / "global",
        )
        try:
            for plan in self.builder.subtopologies():
                self._start_task(TaskId(plan.id, 0), sink)
        except BaseException:
            self._release()
            raise

    def _start_task(self, task_id: TaskId, sink: _DriverSink) -> None:
        state_dir = Path(self.config[cfg.STATE_DIR]) / self.config.application_id / str(task_id)
        task = StreamTask(
            task_id,
            self.builder,
            self.config,
            sink,
            self.cache,
            state_dir,
            system_time=lambda: self.wall_clock_ms,
        )
        self.tasks.append(task)
        task.context.global_stores = self.global_state.stores
        task.initialize()
        task.complete_restoration()
        for tp in task.partitions:
            self._task_by_topic[tp.topic] = task

    # ---- topics ---------------------------------------------------------------------------------
    def create_input_topic(
        self,
        name: str,
        key_serde: Any,
        value_serde: Any,
        start_timestamp_ms: int | None = None,
        auto_advance_ms: int = 0,
    ) -> TestInputTopic:
        known = name in self._task_by_topic or name in self.global_state.by_topic
        if not known and self._subscribe_pattern_topic(name) is None:
            patterns = [source.subscription() for source in self.builder.pattern_sources()]
            raise UnknownTopicError(
                f"Topic {name!r} is not a source topic of this topology; its source topics "
                f"are {sorted(self._task_by_topic)}"
                + (f" and the topics matching {patterns}." if patterns else ".")
            )
        start = self.wall_clock_ms if start_timestamp_ms is None else start_timestamp_ms
        return TestInputTopic(self, name, key_serde, value_serde, start, auto_advance_ms)

    def create_output_topic(self, name: str, key_serde: Any, value_serde: Any) -> TestOutputTopic:
        return TestOutputTopic(self, name, key_serde, value_serde)

    def _subscribe_pattern_topic(self, topic: str) -> StreamTask | None:
        """The task of the pattern source matching ``topic``, now reading it too (as a consumer's pattern
        subscription picks up a new topic); None when no pattern matches."""
        source = self.builder.subscribe_pattern_topic(topic)
        if source is None:
            return None
        task = next(t for t in self.tasks if source in t.nodes)
        task.add_source_partition(TopicPartition(topic, 0), source)
        self._task_by_topic[topic] = task
        return task

    def route(self, topic: str, record: _Produced) -> None:
        task = self._task_by_topic.get(topic) or self._subscribe_pattern_topic(topic)
        if task is not None:
            self._enqueue(task, ConsumerRecord(
                topic, 0, record.offset, record.timestamp, record.key, record.value, record.headers
            ))
        else:
            self._outputs.setdefault(topic, deque()).append(record)

    def pipe(
        self, topic: str, key: bytes | None, value: bytes | None, timestamp: int, headers: Headers
    ) -> None:
        self._check_open()
        offset = self._input_offsets.get(topic, 0)
        self._input_offsets[topic] = offset + 1
        if topic in self.global_state.by_topic:
            self.global_state.apply(topic, [(0, offset, timestamp, key, value)])
            return
        task = self._task_by_topic[topic]
        self._enqueue(task, ConsumerRecord(topic, 0, offset, timestamp, key, value, tuple(headers)))
        self._run()
        if self.commit_per_record:
            self.commit()
        else:
            self._maybe_commit()

    def read_output(self, topic: str) -> _Produced | None:
        queue = self._outputs.get(topic)
        return queue.popleft() if queue else None

    def output_size(self, topic: str) -> int:
        return len(self._outputs.get(topic, ()))

    # ---- time and commits -----------------------------------------------------------------------
    def advance_wall_clock_time(self, delta: int | timedelta) -> None:
        """Moves the driver's clock and fires due WALL_CLOCK_TIME punctuations; then commits (as Kafka's
        driver does), or with ``commit_per_record`` off once ``commit.interval.ms`` has passed."""
        self._check_open()
        self.wall_clock_ms += to_millis(delta)
        for task in self.tasks:
            task.maybe_punctuate_system_time(self.wall_clock_ms)
        self._run()
        if self.commit_per_record:
            self.commit()
        else:
            self._maybe_commit()

    def commit(self) -> None:
        """Commits every task (flush hooks, caches, output), then processes what that produced."""
        while True:
            for task in self.tasks:
                task.commit()
            if not any(task.buffered for task in self.tasks):
                break
            self._run()
        self._last_commit_ms = self.wall_clock_ms

    def _maybe_commit(self) -> None:
        due = self.wall_clock_ms - self._last_commit_ms >= self.config[cfg.COMMIT_INTERVAL_MS]
        if due or any(task.commit_requested for task in self.tasks):
            self.commit()

    def _enqueue(self, task: StreamTask, record: ConsumerRecord) -> None:
        """Buffers ``record`` in its task; a queue that had no record to offer is offered now, by its
        head's timestamp (the queue being processed offers the record after the one in hand)."""
        partition = TopicPartition(record.topic, record.partition)
        task.add_records(partition, [record])
        queue = task.partition_group.queues[partition]
        if queue not in self._ready:
            in_hand = 1 if queue is self._processing else 0
            if len(queue) > in_hand:
                self._ready.offer(queue.records[queue.head + in_hand].timestamp, queue)

    def _run(self) -> None:
        """Processes until no task has buffered records (repartition topics included), one record at a
        time from the queue Kafka's driver would take (``ReadyQueues``: it runs the topology as one
        task). Committing per record, it commits after each one processed, one read back from a
        repartition topic too, as Kafka's driver does (so a cache flushes between the records of one
        input)."""
        while self._ready:
            queue = self._ready.poll()
            task = self._task_by_topic[queue.partition.topic]
            if len(queue) > 1:  # offered again before the record is processed, as Kafka's PartitionGroup
                self._ready.offer(queue.records[queue.head + 1].timestamp, queue)
            self._processing = queue
            try:
                task.process_next_of(queue)
            finally:
                self._processing = None
            # Kafka's driver runs every subtopology in one task: one stream time, the highest timestamp
            # read from any topic (repartition topics too), punctuates them all
            self.stream_time = max(self.stream_time, task.stream_time)
            for each in self.tasks:
                each.maybe_punctuate_stream_time(self.stream_time)
            if self.commit_per_record:
                for each in self.tasks:
                    each.commit()

    # ---- stores ---------------------------------------------------------------------------------
    def get_state_store(self, name: str) -> Any:
        if name in self.global_state.stores:
            return self.global_state.stores[name]
        """The store itself (timestamped stores hold ValueAndTimestamp values)."""
        for task in self.tasks:
            if name in task.context.stores:
                return task.context.stores[name]
        raise TopologyError(
            f"No state store named {name!r}; the topology has "
            f"{sorted(s for t in self.tasks for s in t.context.stores)}."
        )

    def query(self, request: StateQueryRequest) -> StateQueryResult:
        """Answers an IQv2 request from the tasks' stores as last committed, as a running application
        does (``SparkStreams.query``): one result per partition of the store's sub-topology."""
        partitions = {task.id.partition: TaskStores(task.context.stores, _position_of(task))
                      for task in self.tasks if request.store_name in task.context.stores}
        if not partitions and request.store_name not in self.global_state.stores:
            raise InvalidStateStoreError(f"No state store named {request.store_name!r}; the topology has "
                                f"{sorted(self.get_all_state_stores())}.")
        return answer(request, partitions, self.global_state.stores)

    def get_all_state_stores(self) -> dict[str, Any]:
        """Every store of every task (and the global stores), by name."""
        stores: dict[str, Any] = dict(self.global_state.stores)
        for task in self.tasks:
            stores.update(task.context.stores)
        return stores

    def get_timestamped_key_value_store(self, name: str) -> Any:
        return self.get_state_store(name)

    def get_timestamped_window_store(self, name: str) -> Any:
        return self.get_state_store(name)

    def get_window_store(self, name: str) -> Any:
        """A window store view with plain values, also over a timestamped one (as Kafka's driver gives)."""
        from strom.streams.state.window.facade import window_store_view

        return window_store_view(self.get_state_store(name))

    def get_session_store(self, name: str) -> Any:
        return self.get_state_store(name)

    def get_versioned_key_value_store(self, name: str) -> MeteredVersionedKeyValueStore:
        store = self.get_state_store(name)
        if not isinstance(store, MeteredVersionedKeyValueStore):
            raise TopologyError(f"Store {name!r} is not versioned; read it with get_key_value_store.")
        return store

    def get_key_value_store(self, name: str) -> Any:
        """A key-value view with plain values, also over a timestamped store (as Kafka's driver gives)."""
        store = self.get_state_store(name)
        return KeyValueStoreFacade(store) if isinstance(store, MeteredTimestampedKeyValueStore) else store

    @property
    def metrics(self) -> dict[str, int]:
        """Totals over the tasks: processed, dropped_records, punctuated."""
        return {
            "processed": sum(t.metrics.processed for t in self.tasks),
            "dropped_records": sum(
                t.metrics.dropped_records + t.collector.dropped_records for t in self.tasks
            ),
            "punctuated": sum(t.metrics.punctuated for t in self.tasks),
        }

    def produced_topic_names(self) -> set[str]:
        """Every topic the topology wrote to, internal topics included."""
        return set(self.produced)

    def producer_records(self, topic: str) -> list[tuple[bytes | None, bytes | None, int]]:
        """Everything written to ``topic`` so far (changelogs included) as (key, value, timestamp) bytes."""
        return [(r.key, r.value, r.timestamp) for r in self.produced.get(topic, [])]

    def close(self) -> None:
        """Commits, closes every task and removes the driver's own state directory."""
        if self._closed:
            return
        try:
            self.commit()
        finally:
            self._release()

    def _release(self) -> None:
        """Closes tasks and global stores and removes the driver's own state directory."""
        self._closed = True
        try:
            for task in self.tasks:
                task.close()
            self.global_state.close()
        finally:
            if self._own_state_dir:
                shutil.rmtree(self.config[cfg.STATE_DIR], ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise TopologyError("The TopologyTestDriver is closed; create a new one.")

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KeyValueStoreFacade:
    """Plain values over a timestamped store; writes get the driver's wall-clock time."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.name = store.name

    def get(self, key: Any) -> Any:
        return ValueAndTimestamp.get_value_or_null(self.store.get(key))

    def put(self, key: Any, value: Any, timestamp: int = -1) -> None:
        self.store.put(key, ValueAndTimestamp.make(value, timestamp))

    def delete(self, key: Any) -> Any:
        return ValueAndTimestamp.get_value_or_null(self.store.delete(key))

    def all(self) -> Iterator[tuple[Any, Any]]:
        return ((k, v.value) for k, v in self.store.all())

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return ((k, v.value) for k, v in self.store.range(from_key, to_key))

    def approximate_num_entries(self) -> int:
        return self.store.approximate_num_entries()


class TestInputTopic:
    __test__ = False

    def __init__(
        self,
        driver: TopologyTestDriver,
        name: str,
        key_serde: Any,
        value_serde: Any,
        start_ms: int,
        auto_advance_ms: int,
    ) -> None:
        self.driver = driver
        self.name = name
        self.key_serializer = key_serde.serializer()
        self.value_serializer = value_serde.serializer()
        self.current_time_ms = start_ms
        self.auto_advance_ms = auto_advance_ms

    def pipe_input(self, *args: Any, timestamp: int | datetime | None = None, headers: Headers = ()) -> None:
        """Kafka's ``pipeInput`` overloads: ``pipe_input(value)``, ``pipe_input(key, value)``,
        ``pipe_input(key, value, timestamp[, headers])``, ``pipe_input(test_record)``; ``timestamp`` (epoch
        ms or a datetime) may be given by keyword, as for ``pipeInput(value, Instant)``. Without one the
        record gets the topic's time, which then auto-advances."""
        if len(args) == 1 and isinstance(args[0], TestRecord):
            record = args[0]
            key, value, timestamp, headers = record.key, record.value, record.timestamp, record.headers
        elif len(args) == 1:
            key, value = None, args[0]
        elif 2 <= len(args) <= 4:
            key, value, *rest = args
            timestamp = rest[0] if rest else timestamp
            headers = rest[1] if len(rest) > 1 else headers
        else:
            raise TypeError(f"pipe_input takes (value), (key, value), (key, value, timestamp[, headers]) or "
                            f"(TestRecord), got {len(args)} positional arguments.")
        if timestamp is None:
            timestamp = self.current_time_ms
            self.current_time_ms += self.auto_advance_ms
        self.driver.pipe(
            self.name,
            self.key_serializer.serialize(self.name, key),
            self.value_serializer.serialize(self.name, value),
            to_millis(timestamp),
            tuple(headers),
        )

    def pipe_record(self, record: TestRecord) -> None:
        self.pipe_input(record)

    def pipe_record_list(self, records: Iterable[TestRecord | tuple[Any, ...]]) -> None:
        """TestRecords (or tuples of ``pipe_input``'s arguments), in order."""
        for record in records:
            if isinstance(record, TestRecord):
                self.pipe_input(record)
            else:
                self.pipe_input(*record)

    def pipe_key_value_list(self, key_values: Iterable[tuple[Any, Any]],
                            start_timestamp: int | datetime | None = None,
                            advance: int | timedelta | None = None) -> None:
        """``(key, value)`` pairs at the topic's time; with ``start_timestamp`` and ``advance`` (Kafka's
        timestamp-advancing overload) the first at ``start_timestamp`` and each next ``advance`` later,
        leaving the topic's time as it was."""
        times = self._times(start_timestamp, advance)
        for key, value in key_values:
            self.pipe_input(key, value, next(times))

    def pipe_value_list(self, values: Iterable[Any], start_timestamp: int | datetime | None = None,
                        advance: int | timedelta | None = None) -> None:
        """Values with null keys; the timestamps as in ``pipe_key_value_list``."""
        times = self._times(start_timestamp, advance)
        for value in values:
            self.pipe_input(None, value, next(times))

    @staticmethod
    def _times(start: int | datetime | None, advance: int | timedelta | None) -> Iterator[int | None]:
        if (start is None) != (advance is None):
            raise TypeError("Give both start_timestamp and advance, or neither.")
        if start is None:
            while True:
                yield None
        current, step = to_millis(start), to_millis(advance)  # type: ignore[arg-type]
        while True:
            yield current
            current += step

    def advance_time(self, delta: int | timedelta) -> None:
        self.current_time_ms += to_millis(delta)


class TestOutputTopic:
    """Reads what the topology wrote to a topic, in order; each read consumes the record."""

    __test__ = False

    def __init__(self, driver: TopologyTestDriver, name: str, key_serde: Any, value_serde: Any) -> None:
        self.driver = driver
        self.name = name
        self.key_deserializer = key_serde.deserializer()
        self.value_deserializer = value_serde.deserializer()

    def read_record(self) -> TestRecord:
        produced = self.driver.read_output(self.name)
        if produced is None:
            raise IndexError(f"Output topic {self.name!r} is empty.")
        return TestRecord(
            self.key_deserializer.deserialize(self.name, produced.key),
            self.value_deserializer.deserialize(self.name, produced.value),
            produced.timestamp,
            produced.headers,
        )

    def read_value(self) -> Any:
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        record = self.read_record()
        return record.key, record.value

    def read_records_to_list(self) -> list[TestRecord]:
        return [self.read_record() for _ in range(self.get_queue_size())]

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[Any, Any]]:
        return [(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        return dict(self.read_key_values_to_list())

    def get_queue_size(self) -> int:
        return self.driver.output_size(self.name)

    def is_empty(self) -> bool:
        return self.get_queue_size() == 0


def _position_of(task: StreamTask) -> Callable[[], Position]:
    return lambda: Position.of_partitions(task.committed_position)
