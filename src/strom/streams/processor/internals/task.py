"""StreamTask: one sub-topology instance over one partition of each of its source topics.

Whoever drives the task (the TopologyTestDriver, the Spark runtime) feeds it raw records per partition
with ``add_records``, calls ``process`` and the punctuation methods, and commits in two steps so the
commit can be wrapped in a Kafka transaction:

    offsets = task.prepare_commit()   # flush hooks, caches, changelog and output records
    ... commit ``offsets`` (consumer commit, or send_offsets_to_transaction + commit_transaction) ...
    task.post_commit()                # apply buffered store writes and the changelog checkpoint

or ``task.abort()`` when the commit failed, which drops uncommitted store writes.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from strom.errors import ProcessingError, SerializationError, StromError, TopologyError, raised_at
from strom.streams import config as cfg
from strom.streams.errors import ErrorHandlerContext, HandlerResponse, LogAndFailProcessingExceptionHandler
from strom.streams.internals.tuples import new_tuple
from strom.streams.processor.api import Record
from strom.streams.processor.internals.builder import (
    InternalTopologyBuilder,
    ProcessorNodeFactory,
    SinkNodeFactory,
    SourceNodeFactory,
)
from strom.streams.processor.internals.collector import RecordCollector, RecordSink
from strom.streams.processor.internals.context import TaskContext, default_serde
from strom.streams.processor.internals.handlers import resolve
from strom.streams.processor.internals.nodes import (
    ContextFreeProcessor,
    ProcessorNode,
    SinkProcessor,
    SourceNode,
)
from strom.streams.processor.internals.partition_group import (
    NEVER,
    PartitionGroup,
    RecordQueue,
    decode_commit_metadata,
    encode_partition_time,
)
from strom.streams.processor.internals.punctuation import PunctuationSchedule
from strom.streams.processor.records import ConsumerRecord, TaskId, TopicPartition
from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import RecordContext

log = logging.getLogger(__name__)


class TaskMetrics:
    """Counters a runtime reports: records taken from the buffers, records dropped (bad data, null
    keys where a key is needed), punctuations fired."""

    __slots__ = ("dropped_records", "processed", "punctuated")

    def __init__(self) -> None:
        self.processed = 0
        self.dropped_records = 0
        self.punctuated = 0


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class StreamTask:
    """Task ``<subtopology>_<partition>``: its processors, stores, input buffers and output collector.

    ``partitions`` defaults to partition ``task_id.partition`` of every source topic of the
    sub-topology; ``system_time`` is the clock of WALL_CLOCK_TIME punctuations (the driver's mock clock
    in tests). Not thread-safe: one thread drives a task.
    """

    def __init__(
        self,
        task_id: TaskId,
        builder: InternalTopologyBuilder,
        config: cfg.StreamsConfig,
        sink: RecordSink,
        cache: ThreadCache,
        state_dir: Path | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        system_time: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.id = task_id
        self.config = config
        builder.application_id = config.application_id
        self.builder = builder
        self.plan = builder.subtopologies()[task_id.subtopology]
        self.metrics = TaskMetrics()
        self.collector = RecordCollector(
            sink,
            resolve(
                cfg.DEFAULT_PRODUCTION_EXCEPTION_HANDLER,
                config[cfg.DEFAULT_PRODUCTION_EXCEPTION_HANDLER],
                "handle",
            ),
            str(task_id),
        )
        self.deserialization_handler = resolve(
            cfg.DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER,
            config[cfg.DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER],
            "handle",
        )
        processing_handler = resolve(
            cfg.PROCESSING_EXCEPTION_HANDLER, config[cfg.PROCESSING_EXCEPTION_HANDLER], "handle"
        )
        self.processing_handler = (
            None if type(processing_handler) is LogAndFailProcessingExceptionHandler else processing_handler
        )
        """None for the default (fail): processors run unguarded and a failure ends the batch."""
        state_dir = state_dir or Path(config[cfg.STATE_DIR]) / config.application_id / str(task_id)
        self.context = TaskContext(
            config.application_id,
            str(task_id),
            task_id.partition,
            config,
            state_dir,
            self.collector,
            cache,
            system_time,
            self.metrics,
        )
        if self.processing_handler is not None:
            self.context.processing_failed = self._processing_failed
        self.state_manager = self.context.state_manager
        for store in self.plan.stores:
            if store in builder.source_changelogs:
                self.state_manager.use_source_changelog(store, builder.source_changelogs[store])
        self.nodes: dict[str, ProcessorNode] = {}
        self.sources: dict[str, SourceNode] = {}
        self._build_nodes()
        if partitions is None:
            partitions = [TopicPartition(topic, task_id.partition) for topic in self.sources]
        self.partition_group = PartitionGroup(partitions)
        for tp, queue in self.partition_group.queues.items():
            if tp.topic not in self.sources:
                raise TopologyError(
                    f"Partition {tp} is not read by sub-topology {task_id.subtopology}; its source "
                    f"topics are {sorted(self.sources)}."
                )
            queue.read_by(self.sources[tp.topic])
        self.commit_needed = False
        self.committed_position: dict[tuple[str, int], int] = {}
        """Per input partition, the offset of the last record whose writes the stores have committed
        (interactive queries' Position); set after the stores applied a commit's writes."""
        self._flush_nodes = [n for n in self.nodes.values() if callable(getattr(n.processor, "flush", None))]
        self._context_free = self.processing_handler is None and all(
            isinstance(n.processor, ContextFreeProcessor) for n in self.nodes.values())
        """No processor (nor a processing exception handler) reads the record context: the hot loop skips
        making one per record."""
        self._initialized = False

    # ---- construction ---------------------------------------------------------------------------
    def _build_nodes(self) -> None:
        b = self.builder
        default_extractor = self.config[cfg.DEFAULT_TIMESTAMP_EXTRACTOR] or "FailOnInvalidTimestamp"
        for name in self.plan.nodes:
            factory = b.nodes[name]
            if isinstance(factory, SourceNodeFactory):
                extractor = resolve(
                    cfg.DEFAULT_TIMESTAMP_EXTRACTOR,
                    factory.timestamp_extractor or default_extractor,
                    "extract",
                )
                topics = [b.decorate(t) for t in factory.topics]
                node: ProcessorNode = SourceNode(
                    name,
                    topics,
                    self._serde(factory.key_serde, name, "key"),
                    self._serde(factory.value_serde, name, "value"),
                    extractor,
                )
                for topic in topics:
                    self.sources[topic] = node  # type: ignore[assignment]
            elif isinstance(factory, SinkNodeFactory):
                processor = SinkProcessor(
                    self.collector,
                    b.decorate(factory.topic) if factory.topic else None,
                    factory.topic_extractor,
                    self._serde(factory.key_serde, name, "key"),
                    self._serde(factory.value_serde, name, "value"),
                    factory.partitioner,
                    b.decorate,
                )
                node = ProcessorNode(name, processor, [])
            else:
                assert isinstance(factory, ProcessorNodeFactory)
                node = ProcessorNode(name, factory.supplier(), list(factory.stores))
            self.nodes[name] = node
        for name, node in self.nodes.items():
            node.children = [self.nodes[c] for c in b.children(name) if c in self.nodes]
        parents: dict[str, list[ProcessorNode]] = {}
        for node in self.nodes.values():
            for child in node.children:
                parents.setdefault(child.name, []).append(node)
        for name, node in self.nodes.items():
            node.fed_by_sources_only = all(isinstance(p, SourceNode) for p in parents.get(name, [None]))

    def _serde(self, serde: Any, node: str, which: str) -> Any:
        """The given serde, else the default one; a wrapping serde (``with_default``) gets the default
        as its inner serde when it has none."""
        if serde is None:
            return default_serde(self.config, which, f"Node {node!r}")
        if getattr(serde, "inner", True) is None:
            return serde.with_default(default_serde(self.config, which, f"Node {node!r}"))
        return serde

    # ---- life cycle -----------------------------------------------------------------------------
    def initialize(self) -> None:
        """Opens the task's stores (they register with the state manager); restore may follow. With a
        cache of 0 bytes no store caches, as in Kafka Streams: a table then forwards every update (a
        tombstone for an absent key too), where a cache would drop what nets to nothing."""
        no_cache = self.config[cfg.STATESTORE_CACHE_MAX_BYTES] == 0
        for store_name in self.plan.stores:
            store_builder = self.builder.store_builders[store_name]
            if no_cache and getattr(store_builder, "caching_enabled", False):
                store_builder = copy.copy(store_builder).with_caching_disabled()
            store = store_builder.build()
            store.init(self.context, store)

    def complete_restoration(self) -> None:
        """Initializes the processors: after this the task processes records."""
        for node in self.nodes.values():
            node.init(self.context)
        for node in self.nodes.values():
            node.wire()
        for node in self.nodes.values():
            try:
                node.start()
            except StromError:
                raise
            except Exception as exc:
                raise ProcessingError(
                    f"Processor {node.name!r} of task {self.id} failed in init(): {type(exc).__name__}: {exc}"
                ) from exc
        for source in set(self.sources.values()):  # the processors' steps may use what init bound
            source.fuse_chain()
        self._initialized = True

    def close(self) -> None:
        """Closes processors and stores; uncommitted store writes are dropped."""
        errors = []
        if self._initialized:
            for node in self.nodes.values():
                try:
                    node.close()
                except Exception as exc:  # close everything, report the first failure
                    errors.append(exc)
            self._initialized = False
        self.state_manager.close()
        if errors:
            raise ProcessingError(f"Task {self.id}: a processor failed to close: {errors[0]}") from errors[0]

    # ---- feeding and processing -----------------------------------------------------------------
    @property
    def partitions(self) -> list[TopicPartition]:
        return list(self.partition_group.queues)

    def add_source_partition(self, partition: TopicPartition, source_name: str) -> None:
        """Reads ``partition`` too, through source ``source_name``: a topic its pattern matched after the
        task was built (the test driver subscribes pattern topics as they are first piped)."""
        source = self.nodes[source_name]
        assert isinstance(source, SourceNode), f"{source_name!r} is not a source of task {self.id}"
        self.sources[partition.topic] = source
        self.partition_group.add_partition(partition).read_by(source)

    def initialize_task_time(self, committed_metadata: Mapping[TopicPartition, str | None]) -> None:
        """Partition times from the metadata of the committed offsets (``committable_offsets_and_metadata``
        wrote it), stream time their maximum: called before processing, so a record too late before a
        restart stays too late after it, as in Kafka Streams' ``initializeTaskTime``."""
        processor_metadata = self.context.processor_metadata
        for partition, metadata in committed_metadata.items():
            queue = self.partition_group.queues.get(partition)
            if queue is None:
                raise ProcessingError(
                    f"Task {self.id} does not own partition {partition}; it owns "
                    f"{[str(tp) for tp in self.partition_group.queues]}."
                )
            partition_time, processors = decode_commit_metadata(metadata)
            queue.partition_time = max(queue.partition_time, partition_time)
            self.context.stream_time = max(self.context.stream_time, partition_time)
            for key, value in processors.items():  # every partition carries the task's: keep the latest
                processor_metadata[key] = max(value, processor_metadata.get(key, value))

    def add_records(self, partition: TopicPartition, records: Iterable[ConsumerRecord]) -> int:
        if partition not in self.partition_group.queues:
            raise ProcessingError(
                f"Task {self.id} does not own partition {partition}; it owns "
                f"{[str(tp) for tp in self.partition_group.queues]}."
            )
        return self.partition_group.add(partition, records)

    @property
    def buffered(self) -> int:
        return self.partition_group.buffered

    @property
    def stream_time(self) -> int:
        return self.context.stream_time

    def process(self) -> bool:
        """Processes the buffered record with the smallest timestamp, depth-first; False if none is left."""
        return self.process_batch(1) == 1

    def process_all(self) -> int:
        """Processes every buffered record, punctuating on stream time as it advances."""
        return self.process_batch()

    def process_batch(self, max_records: int = -1) -> int:
        """Processes up to ``max_records`` buffered records (all when negative), each depth-first and in
        timestamp order, firing due stream-time punctuations after each."""
        group = self.partition_group
        count = 0
        try:
            while group.buffered and count != max_records:
                queue, until = group.next_run()
                limit = len(queue) if max_records < 0 else min(len(queue), max_records - count)
                count += self._process_run(queue, until, limit)
        except StromError:
            raise
        except Exception as exc:
            raise self._processing_error(exc) from exc
        return count

    def process_next_of(self, queue: RecordQueue) -> None:
        """Processes the next record of ``queue``, a queue of this task with buffered records (for the
        TopologyTestDriver, which chooses the queue over all tasks as Kafka's driver does)."""
        try:
            self._process_run(queue, NEVER, 1)
        except StromError:
            raise
        except Exception as exc:
            raise self._processing_error(exc) from exc

    def _processing_error(self, exc: Exception) -> ProcessingError:
        return ProcessingError(
            self._caught_in_process(exc) + ". Fix the processor, or set processing.exception.handler "
            "to 'LogAndContinueProcessingExceptionHandler' to skip records it fails on."
        )

    def _process_run(self, queue: RecordQueue, until: int, limit: int) -> int:
        """The hot loop of the engine: up to ``limit`` records of one queue while their timestamps stay
        at most ``until`` (the other partitions' next timestamp). Returns how many were taken."""
        context = self.context
        punctuations = context.stream_time_punctuations
        source = queue.source
        key_decode, value_decode = queue.key_decode, queue.value_decode
        entry, chain = source.entry, source.chain
        trusted_timestamps = source.record_timestamp_when_valid
        partition_time = queue.partition_time  # a local in the loop, stored back at the end
        context_free = self._context_free
        taken = 0
        raw = None
        try:
            for raw in islice(queue.records, queue.head, queue.head + limit):
                timestamp = raw.timestamp
                if timestamp > until:
                    break
                taken += 1
                key, value = raw.key, raw.value
                try:
                    if key is not None:
                        key = key_decode(key)  # type: ignore[misc]
                    if value is not None:
                        value = value_decode(value)  # type: ignore[misc]
                except Exception:  # the decoders' contract: the full deserializers decide
                    deserialized = self._deserialize(raw, source)
                    if deserialized is None:
                        continue
                    key, value = deserialized
                if timestamp < 0 or not trusted_timestamps:
                    timestamp = source.timestamp_extractor.extract(raw, partition_time)
                    if timestamp < 0:
                        self.metrics.dropped_records += 1
                        continue
                if timestamp > partition_time:
                    partition_time = timestamp
                    if timestamp > context.stream_time:
                        context.stream_time = timestamp
                headers = raw.headers or ()
                if not context_free:
                    context.record_context = new_tuple(
                        RecordContext, (timestamp, raw.topic, raw.partition, raw.offset, headers)
                    )
                if chain is not None:
                    chain(key, value, timestamp, headers)
                else:
                    entry(new_tuple(Record, (key, value, timestamp, headers)))
                if context.stream_time >= punctuations.next_time:
                    self.maybe_punctuate_stream_time()
        except BaseException:
            if context_free and raw is not None:  # the error names the record that failed
                context.record_context = RecordContext(raw.timestamp, raw.topic, raw.partition, raw.offset)
            raise
        finally:
            queue.partition_time = partition_time
            if taken:
                self.partition_group.consume(queue, taken)
                self.metrics.processed += taken
                self.commit_needed = True
        return taken

    def _processing_failed(self, node: ProcessorNode, record: Record, exc: Exception) -> None:
        """A guarded processor raised: the processing exception handler skips the record (counted in
        ``dropped_records``) or fails the task."""
        current = self.context.record_context
        where = ErrorHandlerContext(current.topic, current.partition, current.offset, record.headers,
                                    node.name, str(self.id), record.timestamp)
        try:
            response = self.processing_handler.handle(where, record, exc)  # type: ignore[union-attr]
        except Exception as handler_exc:
            raise ProcessingError(
                f"The processing.exception.handler failed on an exception of processor {node.name!r} "
                f"(task {self.id}, {current.topic}-{current.partition}@{current.offset}): {handler_exc}"
            ) from exc
        if response is HandlerResponse.CONTINUE:
            self.metrics.dropped_records += 1
            return
        raise ProcessingError(
            self._caught_in_process(exc, node.name)
            + ("" if response is HandlerResponse.FAIL else
               f" (the processing.exception.handler returned {response!r}, not a HandlerResponse)")
        ) from exc

    def _caught_in_process(self, exc: Exception, processor: str | None = None) -> str:
        """What failed where: the task, the processor when known, the record being processed."""
        context = self.context.record_context
        at = "" if processor is None else f", processor={processor}"
        return (f"Exception caught in process. taskId={self.id}{at}, topic={context.topic}, "
                f"partition={context.partition}, offset={context.offset}: {type(exc).__name__}: {exc}"
                + (f" (raised at {where})" if (where := raised_at(exc)) else ""))

    def _deserialize(self, raw: ConsumerRecord, source: SourceNode) -> tuple[Any, Any] | None:
        """Key and value through the source's deserializers; None when the handler skips the record."""
        try:
            return (
                source.key_deserializer.deserialize(raw.topic, raw.key),
                source.value_deserializer.deserialize(raw.topic, raw.value),
            )
        except Exception as exc:
            self._deserialization_failed(raw, exc)
            return None

    def _deserialization_failed(self, raw: ConsumerRecord, exc: Exception) -> None:
        response = self.deserialization_handler.handle(self.context, raw, exc)
        if response is HandlerResponse.CONTINUE:
            self.metrics.dropped_records += 1
            return
        raise SerializationError(
            f"Task {self.id} could not deserialize record {raw.topic}-{raw.partition}@{raw.offset}: {exc}. "
            "Fix the serdes, or set default.deserialization.exception.handler to "
            "'LogAndContinueExceptionHandler' to skip such records."
        ) from exc

    # ---- punctuation ----------------------------------------------------------------------------
    def maybe_punctuate_stream_time(self, stream_time: int | None = None) -> bool:
        """Fires the due STREAM_TIME punctuations at the task's stream time (or ``stream_time``: the
        test driver's, which spans every subtopology as Kafka's single-task driver does)."""
        now = self.context.stream_time if stream_time is None else stream_time
        if now < 0:
            return False
        return self.context.stream_time_punctuations.may_punctuate(now, self._punctuate)

    def maybe_punctuate_system_time(self, now: int | None = None) -> bool:
        now = self.context.system_time() if now is None else now
        return self.context.wall_clock_punctuations.may_punctuate(now, self._punctuate)

    def _punctuate(self, schedule: PunctuationSchedule, now: int) -> None:
        context = self.context
        context.record_context = RecordContext(now)
        try:
            schedule.punctuator(now)
        except StromError:
            raise
        except Exception as exc:
            raise ProcessingError(
                f"Exception caught while punctuating processor {schedule.node.name!r} "
                f"of task {self.id}: {type(exc).__name__}: {exc}"
            ) from exc
        self.metrics.punctuated += 1
        self.commit_needed = True

    # ---- commit ---------------------------------------------------------------------------------
    @property
    def commit_requested(self) -> bool:
        """True when a processor called ``context.commit()`` since the last commit."""
        return self.context.commit_requested

    def prepare_commit(self) -> dict[TopicPartition, int]:
        """Finishes in-flight work, flushes caches, stores and output; returns the offsets to commit
        (the next offset to read per input partition)."""
        try:
            for node in self._flush_nodes:
                node.processor.flush()  # type: ignore[attr-defined]
            self.state_manager.flush()
        except StromError:
            raise
        except Exception as exc:  # a processor downstream of a flushed cache entry raised
            raise ProcessingError(
                f"Exception caught while flushing task {self.id} for a commit: {type(exc).__name__}: {exc}"
            ) from exc
        self.collector.flush()
        return self.committable_offsets()

    def committable_offsets(self) -> dict[TopicPartition, int]:
        """The next offset to read per input partition that has consumed records."""
        return {
            tp: q.consumed_offset + 1
            for tp, q in self.partition_group.queues.items()
            if q.consumed_offset >= 0
        }

    def committable_offsets_and_metadata(self) -> dict[TopicPartition, tuple[int, str]]:
        """``committable_offsets`` with each partition's time and the task's processor metadata as commit
        metadata (Kafka Streams' format), for ``initialize_task_time`` when the task is opened again."""
        return {
            tp: (q.consumed_offset + 1,
                 encode_partition_time(q.partition_time, self.context.processor_metadata))
            for tp, q in self.partition_group.queues.items()
            if q.consumed_offset >= 0
        }

    def commit_metadata(self, partition: TopicPartition) -> str:
        """The metadata to commit with an offset of ``partition``: its partition time (also when this
        task consumed nothing from it, a range of aborted records, but restored its time on open) and
        the task's processor metadata."""
        return encode_partition_time(self.partition_group.queues[partition].partition_time,
                                     self.context.processor_metadata)

    def changelog_offsets(self) -> dict[str, int]:
        """Store name -> the offset after its last changelog record delivered so far (a store whose
        changelog is a source topic: the offset after the last record consumed from it)."""
        offsets = {}
        sourced = self.state_manager.source_changelog_stores()
        for store, (topic, partition) in self.state_manager.changelog_partitions().items():
            if store in sourced:
                queue = self.partition_group.queues.get(TopicPartition(topic, partition))
                delivered = None if queue is None or queue.consumed_offset < 0 else queue.consumed_offset
            else:
                delivered = self.collector.offsets.get(TopicPartition(topic, partition))
            if delivered is not None:
                offsets[store] = delivered + 1
        return offsets

    def source_changelog_partitions(self) -> dict[str, TopicPartition]:
        """Store name -> the source partition that is its changelog: restore such a store only up to
        the task's committed offset of that partition."""
        sourced = self.state_manager.source_changelog_stores()
        return {store: TopicPartition(*tp) for store, tp in sourced.items()}

    def changelog_partitions(self) -> dict[str, TopicPartition]:
        """Logged store name -> its changelog partition, to read for restoration."""
        return {store: TopicPartition(*tp) for store, tp in self.state_manager.changelog_partitions().items()}

    def restore_offsets(self) -> dict[str, int | None]:
        """Logged store name -> the changelog offset to restore from (None: from the beginning)."""
        return self.state_manager.changelog_offsets()

    def restore(self, store_name: str, records: Iterable[Any]) -> int:
        """Replays changelog records ``(key, value, offset, timestamp)`` into a store, between
        ``initialize()`` and ``complete_restoration()``."""
        return self.state_manager.restore(store_name, records)

    def post_commit(self) -> None:
        """After the offsets (and output) are committed: make the store writes and checkpoint durable."""
        self.state_manager.commit(self.changelog_offsets())
        self.committed_position = {**self.committed_position, **{
            (tp.topic, tp.partition): q.consumed_offset
            for tp, q in self.partition_group.queues.items() if q.consumed_offset >= 0}}
        self.commit_needed = False
        self.context.commit_requested = False

    def abort(self) -> None:
        """The commit failed: drop uncommitted store writes; the runtime re-feeds from committed offsets."""
        self.state_manager.abort()
        self.partition_group.clear()
        self.commit_needed = False
        self.context.commit_requested = False

    def commit(self) -> dict[TopicPartition, int]:
        """prepare_commit + post_commit, for drivers that commit offsets themselves right after."""
        offsets = self.prepare_commit()
        self.post_commit()
        return offsets

