"""GlobalKTable: a table replicated in full to every task, and KStream-GlobalKTable joins.

A global table's store is filled from *every* partition of its topic, once per application instance,
and read by all tasks. It has no changelog: the topic itself is its changelog, so the store is
restored by reading the topic from the beginning. Whoever runs the topology (the TopologyTestDriver,
the Spark runtime) owns a ``GlobalStateStores`` and feeds it the topic's records with ``apply``.
Stream records join on ``key_selector(key, value)``, so no co-partitioning or repartitioning is needed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.streams.kstream.internals.functions import key_value_function
from strom.streams.kstream.internals.table_lookup import value_at
from strom.streams.kstream.join_options import ValueJoiner, value_joiner
from strom.streams.kstream.options import Consumed, Materialized, Named
from strom.streams.processor.api import Processor, Record, RecordMetadata
from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import RecordContext, StateStore, StoreTransaction
from strom.streams.state.internals.metered import MeteredVersionedKeyValueStore
from strom.streams.state.stores import KeyValueStoreBuilder, RocksDBVersionedStoreSupplier, Stores
from strom.streams.state.timestamped import ValueAndTimestamp

if TYPE_CHECKING:
    from strom.streams.config import StreamsConfig
    from strom.streams.kstream.builder import InternalStreamsBuilder
    from strom.streams.kstream.kstream import KStream

log = logging.getLogger(__name__)

GLOBAL_TASK_ID = "global"


@dataclass(frozen=True)
class GlobalStoreSpec:
    """What the topology says about one global store: its topic, serdes and store builder."""

    name: str
    topic: str
    key_serde: Any
    value_serde: Any
    store_builder: Any
    source_name: str
    processor_name: str
    state_update_supplier: Callable[[], Processor] | None = None
    """``StreamsBuilder.add_global_store``: a processor that writes the store; None: each record is
    put as it is (a GlobalKTable)."""


class GlobalKTable:
    """A table readable by every task: ``KStream.join(table, key_selector, joiner)``."""

    def __init__(self, builder: InternalStreamsBuilder, spec: GlobalStoreSpec) -> None:
        self.builder = builder
        self.spec = spec

    @property
    def queryable_store_name(self) -> str:
        return self.spec.name


def global_table(builder: InternalStreamsBuilder, topic: str, consumed: Consumed | None,
                 materialized: Materialized | None) -> GlobalKTable:
    """``StreamsBuilder.global_table``: in memory unless ``Materialized.as_`` names a supplier."""
    consumed = consumed or Consumed()
    materialized = materialized or Materialized()
    name = materialized.store_name or f"{topic}-STATE-STORE-{builder.next_index()}"
    key_serde = materialized.key_serde or consumed.key_serde
    value_serde = materialized.value_serde or consumed.value_serde
    supplier = materialized.store_supplier or Stores.in_memory_key_value_store(name)
    store_builder: KeyValueStoreBuilder
    if isinstance(supplier, RocksDBVersionedStoreSupplier):  # joins read it as of the record's time
        store_builder = Stores.versioned_key_value_store_builder(supplier, key_serde, value_serde)
    else:
        store_builder = Stores.timestamped_key_value_store_builder(supplier, key_serde, value_serde)
        store_builder.with_caching_disabled()
    store_builder.with_logging_disabled()
    spec = GlobalStoreSpec(name, topic, key_serde, value_serde, store_builder,
                           builder.node_name(Named(consumed.name), "KSTREAM-SOURCE-"),
                           builder.node_name(None, "KTABLE-SOURCE-"))
    _add_global(builder, spec)
    return GlobalKTable(builder, spec)


def add_global_store(builder: InternalStreamsBuilder, store_builder: Any, topic: str,
                     consumed: Consumed | None, state_update_supplier: Callable[[], Processor]) -> None:
    """``StreamsBuilder.add_global_store``: every instance reads all of ``topic`` through a processor of
    its own (``state_update_supplier()``) that writes the store; any processor may read it."""
    if getattr(store_builder, "logging_enabled", False):
        raise TopologyError(f"Global store {store_builder.name!r} must have logging disabled (its topic is "
                            "its changelog): build it with .with_logging_disabled().")
    if isinstance(state_update_supplier, Processor) or not callable(state_update_supplier):
        raise TopologyError("add_global_store needs a supplier that makes a new processor (the Processor "
                            f"class, or a function returning one), got {state_update_supplier!r}.")
    consumed = consumed or Consumed()
    spec = GlobalStoreSpec(store_builder.name, topic, consumed.key_serde, consumed.value_serde, store_builder,
                           builder.node_name(Named(consumed.name), "KSTREAM-SOURCE-"),
                           builder.node_name(None, "KTABLE-SOURCE-"), state_update_supplier)
    _add_global(builder, spec)


def _add_global(builder: InternalStreamsBuilder, spec: GlobalStoreSpec) -> None:
    internal = builder.internal
    if any(other.topic == spec.topic for other in internal.global_stores.values()):
        raise TopologyError(f"Topic {spec.topic!r} is already read by a global store; one global store per "
                            "topic (reuse that GlobalKTable or store).")
    if spec.name in internal.global_stores or spec.name in internal.store_builders:
        raise TopologyError(f"A store named {spec.name!r} exists already; give the global store another "
                            "name.")
    internal.global_stores[spec.name] = spec


class _GlobalContext:
    """The StateStoreContext of global stores: no task, no cache, no changelog."""

    application_id: str
    task_id = GLOBAL_TASK_ID
    partition = -1

    def __init__(self, config: StreamsConfig, state_dir: Path, topics: dict[str, str]) -> None:
        from strom.streams.processor.internals.context import default_serde

        self.topics = topics
        self.config = config
        self.application_id = config.application_id
        self.state_dir = state_dir
        self.cache = ThreadCache(0)
        self.record_context = RecordContext(-1)
        self.transactions: dict[str, StoreTransaction] = {}
        self._default_serde = default_serde

    @property
    def key_serde(self) -> Any:
        return self._default_serde(self.config, "key", "a global table")

    @property
    def value_serde(self) -> Any:
        return self._default_serde(self.config, "value", "a global table")

    def set_record_context(self, record_context: RecordContext) -> None:
        self.record_context = record_context

    def changelog_topic(self, store_name: str) -> str:
        """The source topic: a global store's topic is its changelog."""
        return self.topics[store_name]

    def log_change(self, store_name: str, *args: Any) -> None:
        raise TopologyError(f"Global store {store_name!r} is not logged.")

    def register_store(self, store: StateStore, transaction: StoreTransaction, logged: bool) -> None:
        self.transactions[store.name] = transaction


class GlobalStateStores:
    """The global stores of one application instance, kept up to date from their topics."""

    def __init__(self, specs: dict[str, GlobalStoreSpec], config: StreamsConfig, state_dir: Path) -> None:
        self.context = _GlobalContext(config, state_dir, {name: spec.topic for name, spec in specs.items()})
        self.specs = specs
        self.stores: dict[str, Any] = {}
        self.by_topic = {spec.topic: spec for spec in specs.values()}
        self.offsets: dict[tuple[str, int], int] = {}
        for name, spec in specs.items():
            store = spec.store_builder.build()
            store.init(self.context, store)
            self.stores[name] = store
        self._deserializers = {spec.topic: self._deserializers_of(spec) for spec in specs.values()}
        self._processors: dict[str, Processor] = {}
        for spec in specs.values():
            if spec.state_update_supplier is not None:
                processor = spec.state_update_supplier()
                processor.init(GlobalProcessorContext(self.context, spec.name, self.stores[spec.name]))
                self._processors[spec.topic] = processor

    def _deserializers_of(self, spec: GlobalStoreSpec) -> tuple[Callable[..., Any], Callable[..., Any]]:
        key_serde = spec.key_serde or self.context.key_serde
        value_serde = spec.value_serde or self.context.value_serde
        return key_serde.deserializer().deserialize, value_serde.deserializer().deserialize

    @property
    def topics(self) -> list[str]:
        return list(self.by_topic)

    def apply(self, topic: str, records: Iterable[tuple[int, int, int, bytes | None, bytes | None]]) -> int:
        """Apply (partition, offset, timestamp, key, value) records of ``topic`` from any partition, in
        offset order per partition; a None value deletes. Used for restoring and for keeping up."""
        spec = self.by_topic[topic]
        store = self.stores[spec.name]
        key_from, value_from = self._deserializers[topic]
        versioned = isinstance(store, MeteredVersionedKeyValueStore)
        processor = self._processors.get(topic)
        applied = 0
        for partition, offset, timestamp, key_bytes, value_bytes in records:
            self.offsets[(topic, partition)] = offset + 1
            key = key_from(topic, key_bytes)
            self.context.set_record_context(RecordContext(timestamp, topic, partition, offset))
            if processor is not None:  # the user's processor decides, null keys included
                processor.process(Record(key, value_from(topic, value_bytes), timestamp, ()))
                applied += 1
                continue
            if key is None:
                log.warning("Skipping a global table record with a null key (%s-%d@%d)",
                            topic, partition, offset)
                continue
            value = value_from(topic, value_bytes)
            if versioned:
                store.put(key, value, timestamp)
            else:
                store.put(key, ValueAndTimestamp.make(value, timestamp))
            applied += 1
        self.context.transactions[spec.name].commit(None)
        return applied

    def close(self) -> None:
        for processor in self._processors.values():
            processor.close()
        for store in self.stores.values():
            store.close()


class GlobalProcessorContext:
    """What the processor of ``add_global_store`` sees: its own store and the record's metadata; it
    cannot forward (a global store feeds no downstream node) or schedule."""

    def __init__(self, context: _GlobalContext, store_name: str, store: Any) -> None:
        self._context = context
        self._store_name = store_name
        self._store = store

    @property
    def application_id(self) -> str:
        return self._context.application_id

    @property
    def task_id(self) -> str:
        return GLOBAL_TASK_ID

    def get_state_store(self, name: str) -> Any:
        if name != self._store_name:
            raise TopologyError(f"The processor of global store {self._store_name!r} can only use that "
                                f"store, not {name!r}.")
        return self._store

    def record_metadata(self) -> RecordMetadata:
        record = self._context.record_context
        return RecordMetadata(record.topic, record.partition, record.offset)

    def forward(self, *args: Any, **kwargs: Any) -> None:
        raise TopologyError(f"The processor of global store {self._store_name!r} cannot forward records: "
                            "a global store has no downstream processors.")

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        raise TopologyError(f"The processor of global store {self._store_name!r} cannot schedule "
                            "punctuations.")


class KStreamGlobalKTableJoin(Processor):
    """Looks up ``key_selector(key, value)`` in the global store; the output keeps the stream key."""

    def __init__(self, store_name: str, key_selector: Callable[[Any, Any], Any], joiner: ValueJoiner,
                 left: bool) -> None:
        self.store_name = store_name
        self.key_selector = key_selector
        self.joiner = joiner
        self.left = left

    def init(self, context: Any) -> None:
        self.context = context
        self.lookup = value_at(context.get_state_store(self.store_name))

    def process(self, record: Record) -> None:
        if record.value is None:
            self.context.metrics.dropped_records += 1
            return
        table_key = self.key_selector(record.key, record.value)
        current = None if table_key is None else self.lookup(table_key, record.timestamp)
        if current is None and not self.left:
            if table_key is None:
                self.context.metrics.dropped_records += 1
            return
        other = None if current is None else current.value
        self.context.forward(record.with_value(self.joiner(record.key, record.value, other)))


def stream_global_table_join(stream: KStream, table: GlobalKTable, kind: str,
                             key_selector: Callable[..., Any], joiner: Callable[..., Any],
                             named: Named | None = None) -> KStream:
    from strom.streams.kstream.kstream import KStream

    selector = key_value_function(key_selector, "KStream.join(GlobalKTable) key selector")
    fn = value_joiner(joiner, "KStream.join(GlobalKTable)")
    builder = stream.builder
    name = builder.node_name(named, "KSTREAM-JOIN-" if kind == "inner" else "KSTREAM-LEFTJOIN-")
    store_name = table.spec.name
    builder.internal.add_processor(
        name, lambda: KStreamGlobalKTableJoin(store_name, selector, fn, kind == "left"), stream.name)
    return KStream(builder, name, stream.key_serde, None, stream.repartition_required, stream.source_topics)
