"""The processor context: one TaskContext per task (the StateStoreContext stores use) and one
ProcessorContextImpl per node (the ProcessorContext a processor sees, with ``forward`` bound to the
node's children so a depth-first hop is a direct call)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.errors import ConfigError, TopologyError
from strom.kafka.headers import Headers
from strom.kafka.serdes import Serdes
from strom.streams import config as cfg
from strom.streams.internals.compiled import Lines
from strom.streams.internals.tuples import new_tuple
from strom.streams.processor.api import (
    Cancellable,
    HeldHeaders,
    PunctuationType,
    Punctuator,
    Record,
    RecordMetadata,
    held_headers,
)
from strom.streams.processor.internals.fusion import fuse
from strom.streams.processor.internals.punctuation import PunctuationQueue, PunctuationSchedule
from strom.streams.state.context import RecordContext, StateStore, StoreTransaction, changelog_topic_name
from strom.streams.state.manager import ProcessorStateManager

if TYPE_CHECKING:
    from strom.streams.config import StreamsConfig
    from strom.streams.processor.internals.collector import RecordCollector
    from strom.streams.processor.internals.nodes import ProcessorNode
    from strom.streams.state.cache import ThreadCache


def default_serde(config: StreamsConfig, which: str, user: str) -> Any:
    """``default.key.serde`` / ``default.value.serde``; a clear error when needed but unset."""
    key = cfg.DEFAULT_KEY_SERDE if which == "key" else cfg.DEFAULT_VALUE_SERDE
    value = config[key]
    if value is None:
        raise ConfigError(
            f"{user} needs a {which} serde and none is set. Pass one (Consumed.with_, "
            f"Produced.with_, Materialized.with_{which}_serde) or set {key!r}."
        )
    return Serdes.from_config(key, value)


def with_prefix(configs: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Kafka's ``appConfigsWithPrefix``: the configurations under ``prefix``, keyed without it."""
    return {key.removeprefix(prefix): value for key, value in configs.items() if key.startswith(prefix)}


NO_RECORD = RecordContext(-1)


class TaskContext:
    """Task-wide context: identity, stores, record context, clocks, punctuation and commit requests."""

    def __init__(
        self,
        application_id: str,
        task_id: str,
        partition: int,
        config: StreamsConfig,
        state_dir: Path,
        collector: RecordCollector,
        cache: ThreadCache,
        system_time: Callable[[], int],
        metrics: Any,
    ) -> None:
        self.application_id = application_id
        self.task_id = task_id
        self.partition = partition
        self.config = config
        self.state_dir = state_dir
        self.collector = collector
        self.cache = cache
        self.state_manager: ProcessorStateManager = ProcessorStateManager(
            task_id, partition, state_dir, self.changelog_topic, cache
        )
        self.system_time = system_time
        self.metrics = metrics
        self.changelog_topics: dict[str, str] = {}
        """Store name -> changelog topic, filled on first use."""
        self.stores: dict[str, StateStore] = {}
        self.global_stores: dict[str, StateStore] = {}
        """Global tables' stores, shared by all tasks (set by the runner); any processor may read them."""
        self.stream_time = -1
        self.commit_requested = False
        self.stream_time_punctuations = PunctuationQueue()
        self.wall_clock_punctuations = PunctuationQueue()
        self.record_context = NO_RECORD
        """The context of the record being processed (timestamp, topic, partition, offset, headers)."""
        self.processor_metadata: dict[str, int] = {}
        """What processors keep in the commit metadata (Kafka's ProcessorMetadata), e.g. the last window
        close time a windowed aggregation emitted final results for; restored on open."""
        self.processing_failed: Callable[[Any, Record, Exception], None] | None = None
        """Set when a processing.exception.handler other than the default is configured: each processor
        node then runs guarded and hands what it raises to this (node, record, exception)."""

    # ---- StateStoreContext ----------------------------------------------------------------------
    @property
    def app_configs(self) -> dict[str, Any]:
        return self.config.as_dict()

    @property
    def key_serde(self) -> Any:
        return default_serde(self.config, "key", f"a store of task {self.task_id}")

    @property
    def value_serde(self) -> Any:
        return default_serde(self.config, "value", f"a store of task {self.task_id}")

    def set_record_context(self, record_context: RecordContext) -> None:
        self.record_context = record_context

    def changelog_topic(self, store_name: str) -> str:
        topic = self.changelog_topics.get(store_name)
        if topic is None:
            topic = self.changelog_topics[store_name] = changelog_topic_name(self.application_id, store_name)
        return topic

    def log_change(
        self, store_name: str, key: bytes, value: bytes | None, timestamp: int, headers: HeldHeaders
    ) -> None:
        topic = self.changelog_topics.get(store_name) or self.changelog_topic(store_name)
        if type(headers) is not tuple:
            headers = tuple(headers)
        self.collector.send_bytes(topic, self.partition, key, value, timestamp, headers)

    def fused_log_change(self, store_name: str) -> Lines:
        """``log_change`` as lines of Python over the locals ``kb, lv, lt, lh`` (key, value, timestamp,
        headers) for a caller that inlines it (a record cache's flush), the topic and partition bound;
        names ``{p}``-prefixed."""
        collector = self.collector
        lines = (
            "if type(lh) is not tuple:",
            "    lh = tuple(lh)",
            "if {p}collector.send_error is not None:",  # collector.send_bytes, inlined
            "    {p}collector.check_error()",
            "{p}send({p}collector, {p}topic, {p}partition, kb, lv, lt, lh)",
        )
        return lines, {"{p}collector": collector, "{p}send": collector.sink.send,
                       "{p}topic": self.changelog_topic(store_name), "{p}partition": self.partition}

    def register_store(self, store: StateStore, transaction: StoreTransaction, logged: bool) -> None:
        self.stores[store.name] = store
        self.state_manager.register_store(store, transaction, logged)


class ProcessorContextImpl:
    """The context one processor node sees."""

    def __init__(self, task: TaskContext, node: ProcessorNode) -> None:
        self.task = task
        self.node = node
        self._targets: tuple[Callable[[Record], None], ...] = ()
        self._by_name: dict[str, Callable[[Record], None]] = {}
        self.forwarder: Callable[[Record], None] = _drop
        """``forward(record)`` to all children as one plain call: a single child's entry itself."""
        self._made_headers: tuple[HeldHeaders, RecordContext] | None = None
        """(what the record context held, the context holding its Headers) after ``headers()``: a record
        forwarded with what the context held carries that Headers."""

    def wire(self) -> None:
        """Binds ``forward`` to the node's children once they exist."""
        self._by_name = {child.name: child.entry for child in self.node.children}
        self._targets = tuple(self._by_name.values())
        self.forwarder = _forwarder(self._targets)

    def forward_flushed(self, key: Any, value: Any, timestamp: int) -> None:
        """Forwards an update a cache flushed, under the flushed entry's record context (its headers go
        downstream, as in Kafka). When the update's timestamp is the context's too (a window store's:
        the entry's own), the steps below may run fused (``forward_fields``)."""
        current = self.task.record_context
        if timestamp == current.timestamp:
            self.forward_fields(key, value, timestamp, current.headers)
        else:
            self.forward_record_fields(key, value, timestamp, current.headers)

    def fused_forward_flushed(self) -> Lines:
        """``forward_flushed(k, fv, t)`` as lines of Python over the locals ``k, fv, t`` and ``c``, the
        flushed entry's record context (set as the task's), for a caller that inlines it (a record
        cache's fused flush); names ``{p}``-prefixed."""
        return ("if t == c[0]:",
                "    {p}context.forward_fields(k, fv, t, c[4])",
                "else:",
                "    {p}context.forward_record_fields(k, fv, t, c[4])"), {"{p}context": self}

    def forward_fields(self, key: Any, value: Any, timestamp: int, headers: HeldHeaders) -> None:
        """``forwarder(Record(key, value, timestamp, headers))`` for a caller whose timestamp and headers
        are the task's record context's (a cache flush, under the flushed entry's context): the steps
        below a single child may then run fused, stamping skipped (fusion.py). The first call (after
        every processor started) binds the fused chain, or ``forward_record_fields``, in place of this."""
        children = self.node.children
        chain = fuse(children[0]) if len(children) == 1 else None
        self.forward_fields = chain or self.forward_record_fields  # type: ignore[method-assign]
        self.forward_fields(key, value, timestamp, headers)

    def forward_record_fields(self, key: Any, value: Any, timestamp: int, headers: HeldHeaders) -> None:
        """``forward_fields`` unfused: one Record to the forwarder."""
        self.forwarder(new_tuple(Record, (key, value, timestamp, headers)))

    @property
    def application_id(self) -> str:
        return self.task.application_id

    @property
    def task_id(self) -> str:
        return self.task.task_id

    def app_configs(self) -> dict[str, Any]:
        """Every configuration of the application, defaults included (Kafka's ``appConfigs()``)."""
        return self.task.config.as_dict()

    def app_configs_with_prefix(self, prefix: str) -> dict[str, Any]:
        """The configurations whose key starts with ``prefix``, keyed without it."""
        return with_prefix(self.app_configs(), prefix)

    def key_serde(self) -> Any:
        """The default key serde (``default.key.serde``); a ConfigError if none is set."""
        return self.task.key_serde

    def value_serde(self) -> Any:
        """The default value serde (``default.value.serde``); a ConfigError if none is set."""
        return self.task.value_serde

    @property
    def state_dir(self) -> Path:
        return self.task.state_dir

    def forward(self, record: Record, child_name: str | None = None) -> None:
        """Forwards to every child (or ``child_name``). The record's headers go with it, changes made
        through ``record.headers`` or ``headers()`` included; children see them as the record context's
        headers too, as in Kafka Streams."""
        if self._made_headers is None and getattr(record, "_headers", None) is None:
            self._forward(record, child_name)  # nobody made a Headers: the record goes as it is
            return
        task = self.task
        held = held_headers(record)
        made = self._made_headers
        if made is not None and held is made[0] and task.record_context is made[1]:
            held = made[1].headers
        if record[3] is not held:
            record = new_tuple(Record, (record[0], record[1], record[2], held))
        if type(held) is not Headers or task.record_context.headers is held:
            self._forward(record, child_name)
            return
        previous = task.record_context
        task.record_context = previous._replace(timestamp=record[2], headers=held)
        try:
            self._forward(record, child_name)
        finally:
            task.record_context = previous

    def _forward(self, record: Record, child_name: str | None) -> None:
        if child_name is None:
            for target in self._targets:
                target(record)
            return
        target = self._by_name.get(child_name)
        if target is None:
            raise TopologyError(
                f"Processor {self.node.name!r} has no child named {child_name!r}; its children "
                f"are {sorted(self._by_name)}."
            )
        target(record)

    def headers(self) -> Headers:
        """The headers of the record being processed (Kafka's ``ProcessorContext.headers()``), mutable; a
        record forwarded with the headers it arrived with carries the changes. In ``process(record)``,
        ``record.headers`` is the usual way."""
        task = self.task
        current = task.record_context
        if type(current.headers) is Headers:
            return current.headers
        made = Headers(current.headers)
        task.record_context = new_tuple(RecordContext, (*current[:4], made))
        self._made_headers = (current.headers, task.record_context)
        return made

    def get_state_store(self, name: str) -> Any:
        if name in self.task.global_stores:
            return self.task.global_stores[name]
        if name not in self.node.stores:
            raise TopologyError(
                f"Processor {self.node.name!r} has no access to state store {name!r}; connect them with "
                "Topology.connect_processor_and_state_stores (or name the store in process(..., stores))."
            )
        return self.task.stores[name]

    def schedule(
        self, interval: int | timedelta, punctuation_type: PunctuationType, punctuator: Punctuator
    ) -> Cancellable:
        """Calls ``punctuator(timestamp)`` every ``interval`` (milliseconds or a timedelta) of stream
        time or wall-clock time; the returned object's ``cancel()`` stops it."""
        interval_ms = int(interval.total_seconds() * 1000) if isinstance(interval, timedelta) else interval
        if not isinstance(interval_ms, int) or interval_ms < 1:
            raise TopologyError(f"Punctuation interval must be at least 1 ms, got {interval!r}.")
        if not isinstance(punctuation_type, PunctuationType):
            raise TopologyError(
                "Punctuation type must be PunctuationType.STREAM_TIME or WALL_CLOCK_TIME, got "
                f"{punctuation_type!r}."
            )
        if punctuation_type is PunctuationType.STREAM_TIME:
            return self.task.stream_time_punctuations.schedule(
                PunctuationSchedule(self.node, 0, interval_ms, punctuator)
            )
        start = self.task.system_time() + interval_ms
        return self.task.wall_clock_punctuations.schedule(
            PunctuationSchedule(self.node, start, interval_ms, punctuator)
        )

    def commit(self) -> None:
        self.task.commit_requested = True

    def processor_metadata_for_key(self, key: str) -> int | None:
        """A value this task's processors committed under ``key`` (restored when the task opens)."""
        return self.task.processor_metadata.get(key)

    def add_processor_metadata_key_value(self, key: str, value: int) -> None:
        """Commits ``value`` under ``key`` with the task's next offsets (atomically with them under
        exactly-once)."""
        self.task.processor_metadata[key] = value

    def record_metadata(self) -> RecordMetadata | None:
        context = self.task.record_context
        if context.topic is None:
            return None
        return RecordMetadata(context.topic, context.partition, context.offset)

    def current_stream_time_ms(self) -> int:
        return self.task.stream_time

    def current_system_time_ms(self) -> int:
        return self.task.system_time()

    # ---- what stores and DSL processors use -----------------------------------------------------
    @property
    def metrics(self) -> Any:
        """The task's counters (``processed``, ``dropped_records``, ``punctuated``)."""
        return self.task.metrics

    @property
    def record_headers(self) -> HeldHeaders:
        return self.task.record_context.headers

    @property
    def record_timestamp(self) -> int:
        return self.task.record_context.timestamp

    @property
    def cache(self) -> ThreadCache:
        return self.task.cache


def _drop(record: Record) -> None:
    """Forwarding from a node without children."""


def _forwarder(targets: tuple[Callable[[Record], None], ...]) -> Callable[[Record], None]:
    if not targets:
        return _drop
    if len(targets) == 1:
        return targets[0]

    def fan_out(record: Record) -> None:
        for target in targets:
            target(record)

    return fan_out
