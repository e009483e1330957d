"""The global stores of one application instance at run time (Kafka's GlobalStateManager and
GlobalProcessorContext).

A global store has no changelog: its topic is its changelog, so the store is restored by reading the
topic from the beginning. Whoever runs the topology (the TopologyTestDriver, the Spark runtime) owns a
``GlobalStateStores`` and feeds it the topic's records with ``apply`` (``global_state_reader`` reads
them from Kafka).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.kafka.serdes import decoder_of
from strom.streams.processor.api import Processor, Record, RecordMetadata
from strom.streams.processor.internals.context import default_serde, with_prefix
from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import RecordContext, StateStore, StoreTransaction
from strom.streams.state.internals.metered import (
    MeteredTimestampedKeyValueStore,
    MeteredVersionedKeyValueStore,
)
from strom.streams.state.timestamped import ValueAndTimestamp

if TYPE_CHECKING:
    from strom.streams.config import StreamsConfig

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


class _GlobalContext:
    """The StateStoreContext of global stores: no task, no cache, no changelog."""

    application_id: str
    task_id = GLOBAL_TASK_ID
    partition = -1

    def __init__(self, config: StreamsConfig, state_dir: Path, topics: dict[str, str]) -> None:
        self.topics = topics
        self.config = config
        self.application_id = config.application_id
        self.state_dir = state_dir
        self.cache = ThreadCache(0)
        self.record_context = RecordContext(-1)
        self.transactions: dict[str, StoreTransaction] = {}

    @property
    def key_serde(self) -> Any:
        return default_serde(self.config, "key", "a global table")

    @property
    def value_serde(self) -> Any:
        return default_serde(self.config, "value", "a global table")

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
        self._decoders = {spec.topic: self._decoders_of(spec) for spec in specs.values()}
        self._processors: dict[str, Processor] = {}
        self._plain = {name for name, spec in specs.items() if spec.state_update_supplier is None
                       and self._is_plain(self.stores[name])}
        for spec in specs.values():
            if spec.state_update_supplier is not None:
                processor = spec.state_update_supplier()
                processor.init(GlobalProcessorContext(self.context, spec.name, self.stores[spec.name]))
                self._processors[spec.topic] = processor

    def _plain_entries(self, topic: str, records: Iterable[tuple[int, int, int, bytes | None, bytes | None]]
                       ) -> Generator[tuple[Any, Any, int], None, None]:
        """``apply``'s records as the ``(key, value, timestamp)`` a plain table puts, deserialized as
        ``apply`` does (a bad record raises at the same record); null keys skipped with a warning.
        The offsets and the record context are set once, after the last record read (nothing below
        the metered layer reads the context)."""
        key_from, value_from = self._deserializers[topic]
        key_decode, value_decode = self._decoders[topic]  # on any exception the deserializer decides
        last: dict[int, int] = {}  # partition -> offset of its last record
        partition = offset = timestamp = -1
        try:
            for partition, offset, timestamp, key_bytes, value_bytes in records:
                last[partition] = offset
                try:
                    key = key_decode(key_bytes)
                except Exception:
                    key = key_from(topic, key_bytes)
                if key is None:
                    log.warning("Skipping a global table record with a null key (%s-%d@%d)",
                                topic, partition, offset)
                    continue
                if value_bytes is None:
                    yield key, value_from(topic, None), timestamp
                    continue
                try:
                    value = value_decode(value_bytes)
                except Exception:
                    value = value_from(topic, value_bytes)
                yield key, value, timestamp
        finally:
            for at, end in last.items():
                self.offsets[(topic, at)] = end + 1
            if last:
                self.context.set_record_context(RecordContext(timestamp, topic, partition, offset))

    def _serdes_of(self, spec: GlobalStoreSpec) -> tuple[Any, Any]:
        return spec.key_serde or self.context.key_serde, spec.value_serde or self.context.value_serde

    def _deserializers_of(self, spec: GlobalStoreSpec) -> tuple[Callable[..., Any], Callable[..., Any]]:
        key_serde, value_serde = self._serdes_of(spec)
        return key_serde.deserializer().deserialize, value_serde.deserializer().deserialize

    def _decoders_of(self, spec: GlobalStoreSpec) -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
        key_serde, value_serde = self._serdes_of(spec)
        topic = spec.topic
        return decoder_of(key_serde.deserializer(), topic), decoder_of(value_serde.deserializer(), topic)

    def _is_plain(self, store: Any) -> bool:
        """A timestamped store whose metered layer sits right on its transaction (no cache, no change
        logging, no supplier's layer): ``put_all_timestamped`` writes it as ``put`` would."""
        return (type(store) is MeteredTimestampedKeyValueStore
                and store.wrapped is self.context.transactions.get(store.name))

    @property
    def topics(self) -> list[str]:
        return list(self.by_topic)

    def apply(self, topic: str, records: Iterable[tuple[int, int, int, bytes | None, bytes | None]]) -> int:
        """Apply (partition, offset, timestamp, key, value) records of ``topic`` from any partition, in
        offset order per partition; a None value deletes. Used for restoring and for keeping up."""
        spec = self.by_topic[topic]
        store = self.stores[spec.name]
        if spec.name in self._plain:
            entries = self._plain_entries(topic, records)
            try:
                applied = store.put_all_timestamped(entries)
            finally:
                entries.close()  # sets the offsets now, also when the store raised
            self.context.transactions[spec.name].commit(None)
            return applied
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

    def app_configs(self) -> dict[str, Any]:
        return self._context.config.as_dict()

    def app_configs_with_prefix(self, prefix: str) -> dict[str, Any]:
        return with_prefix(self.app_configs(), prefix)

    def key_serde(self) -> Any:
        return self._context.key_serde

    def value_serde(self) -> Any:
        return self._context.value_serde

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
