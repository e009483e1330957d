"""The global stores of one application instance at run time (Kafka's GlobalStateManager and
GlobalProcessorContext).

A global store has no changelog: its topic is its changelog, so the store is restored by reading the
topic from the beginning. Whoever runs the topology (the TopologyTestDriver, the Spark runtime) owns a
``GlobalStateStores`` and feeds it the topic's records with ``apply`` (``global_state_reader`` reads
them from Kafka).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message

from strom.errors import SerializationError, TopologyError
from strom.kafka.serdes import ByteArraySerde, IntegerSerde, LongSerde, ShortSerde, decoder_of, encoder_of
from strom.streams import config as cfg
from strom.streams.errors import HandlerResponse
from strom.streams.processor.api import Processor, Record, RecordMetadata
from strom.streams.processor.internals.context import default_serde, with_prefix
from strom.streams.processor.internals.handlers import resolve
from strom.streams.processor.records import ConsumerRecord
from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import RecordContext, StateStore, StoreTransaction
from strom.streams.state.internals.metered import (
    MeteredTimestampedKeyValueStore,
    MeteredVersionedKeyValueStore,
)
from strom.streams.state.internals.timestamps import pack_timestamp
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
    """The global stores of one application instance, kept up to date from their topics.

    Each fetch is applied up to the record that fails, if one does: what came before it is committed
    and the partition's offset points at it, so a retry starts there (Kafka's global thread, whose
    puts are not transactional, leaves its store and offsets the same way). A record that will not
    deserialize goes to ``default.deserialization.exception.handler`` first, as in Kafka's
    GlobalStateUpdateTask: LogAndContinue skips it, LogAndFail fails the fetch at it.
    """

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
        self._handler = resolve(cfg.DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER,
                                config[cfg.DEFAULT_DESERIALIZATION_EXCEPTION_HANDLER], "handle")
        self._deserializers = {spec.topic: self._deserializers_of(spec) for spec in specs.values()}
        self._decoders = {spec.topic: self._decoders_of(spec) for spec in specs.values()}
        self._processors: dict[str, Processor] = {}
        self._plain = {name for name, spec in specs.items() if spec.state_update_supplier is None
                       and self._is_plain(self.stores[name])}
        self._raw = {name: self._bulk_writer(name) for name in self._plain
                     if all(_reproduces_bytes(serde, specs[name].topic)
                            for serde in self._serdes_of(specs[name]))}
        for spec in specs.values():
            if spec.state_update_supplier is not None:
                processor = spec.state_update_supplier()
                processor.init(GlobalProcessorContext(self.context, spec.name, self.stores[spec.name]))
                self._processors[spec.topic] = processor

    def _serdes_of(self, spec: GlobalStoreSpec) -> tuple[Any, Any]:
        return spec.key_serde or self.context.key_serde, spec.value_serde or self.context.value_serde

    def _deserializers_of(self, spec: GlobalStoreSpec) -> tuple[Callable[..., Any], Callable[..., Any]]:
        key_serde, value_serde = self._serdes_of(spec)
        return key_serde.deserializer().deserialize, value_serde.deserializer().deserialize

    def _decoders_of(self, spec: GlobalStoreSpec) -> tuple[Callable[[bytes], Any], Callable[[bytes], Any]]:
        key_serde, value_serde = self._serdes_of(spec)
        topic = spec.topic
        return decoder_of(key_serde.deserializer(), topic), decoder_of(value_serde.deserializer(), topic)

    def _bulk_writer(self, name: str) -> Callable[[list[tuple[bytes, bytes | None]], None], None]:
        """How the raw path writes a fetch to the store under the transaction: as a restore writes
        (RocksDB: without its write-ahead log). A global store needs no log: its offsets are not kept,
        so every process reads its topic from the beginning again (Kafka Streams runs RocksDB without
        the log for every store)."""
        inner = self.context.transactions[name].wrapped
        return getattr(inner, "restore_batch", inner.write_batch)

    def _is_plain(self, store: Any) -> bool:
        """A timestamped store whose metered layer sits right on its transaction (no cache, no change
        logging, no supplier's layer): ``put_all_timestamped`` writes it as ``put`` would."""
        return (type(store) is MeteredTimestampedKeyValueStore
                and store.wrapped is self.context.transactions.get(store.name))

    @property
    def topics(self) -> list[str]:
        return list(self.by_topic)

    def apply(self, topic: str, records: Iterable[tuple[int, int, int, bytes | None, bytes | None]]) -> int:
        """``apply_fetch`` for (partition, offset, timestamp, key, value) records of ``topic`` from any
        partition, in offset order per partition (the test driver's records); a None value deletes."""
        applied = 0
        for partition, group in groupby(records, itemgetter(0)):
            applied += self.apply_fetch(topic, partition, [
                Message(topic=topic, partition=partition, offset=offset, key=key, value=value,
                        timestamp=(TIMESTAMP_CREATE_TIME, timestamp))
                for _, offset, timestamp, key, value in group])
        return applied

    def apply_fetch(self, topic: str, partition: int, messages: Sequence[Message]) -> int:
        """Apply and commit one fetch of ``topic``'s ``partition``: records as the consumer hands them
        over, in offset order; returns how many were applied. Used for restoring and for keeping up."""
        if not messages:
            return 0
        name = self.by_topic[topic].name
        if name in self._raw:
            return self._apply_raw(topic, partition, messages)
        transaction = self.context.transactions[name]
        try:
            if name in self._plain:
                entries = self._typed_entries(topic, partition, messages)
                try:
                    return self.stores[name].put_all_timestamped(entries)
                finally:
                    entries.close()  # sets the offsets now, also when the store raised
            return self._apply_each(topic, partition, messages)
        finally:
            transaction.commit(None)

    def _apply_raw(self, topic: str, partition: int, messages: Sequence[Message]) -> int:
        """A plain table whose serdes give back the bytes they read (``_reproduces_bytes``): the topic's
        bytes are written as they are, behind the 8-byte timestamp, straight to the store under the
        transaction (its buffer is empty between fetches) by ``_bulk_writer``; each record is still
        decoded, so a record its serdes cannot read goes to the handler as on every other path."""
        name = self.by_topic[topic].name
        key_decode, value_decode = self._decoders[topic]
        writes: list[tuple[bytes, bytes | None]] = []
        write = writes.append
        message = messages[0]
        completed = False
        try:
            for message in messages:
                key, value = message.key(), message.value()
                try:
                    if key is not None:
                        key_decode(key)
                    if value is not None:
                        value_decode(value)
                except Exception:
                    if self._deserialized(topic, message) is None:
                        continue
                if key is None:
                    self._skip_null_key(topic, message)
                elif value is None:
                    write((key, None))
                else:
                    write((key, pack_timestamp(message.timestamp()[1]) + value))
            completed = True
        finally:
            self.stores[name].metrics.put += len(writes)
            self._raw[name](writes, None)
            self._read_up_to(topic, partition, message, completed)
        return len(writes)

    def _typed_entries(self, topic: str, partition: int, messages: Sequence[Message]
                       ) -> Generator[tuple[Any, Any, int], None, None]:
        """The ``(key, value, timestamp)`` a plain table puts for each record, deserialized as the
        per-record path deserializes; null keys skipped with a warning. The offsets and the record
        context are set when the generator ends: up to the last record the store took."""
        value_from = self._deserializers[topic][1]
        key_decode, value_decode = self._decoders[topic]  # on any exception the deserializer decides
        message = messages[0]
        completed = False
        try:
            for message in messages:
                key_bytes, value_bytes = message.key(), message.value()
                try:
                    key = key_decode(key_bytes)
                    value = value_from(topic, None) if value_bytes is None else value_decode(value_bytes)
                except Exception:
                    deserialized = self._deserialized(topic, message)
                    if deserialized is None:
                        continue
                    key, value = deserialized
                if key is None:
                    self._skip_null_key(topic, message)
                    continue
                yield key, value, message.timestamp()[1]
            completed = True
        finally:
            self._read_up_to(topic, partition, message, completed)

    def _apply_each(self, topic: str, partition: int, messages: Sequence[Message]) -> int:
        """Record by record: a processor's (``add_global_store``), a versioned store's, or a store
        with layers of its own."""
        store = self.stores[self.by_topic[topic].name]
        key_from, value_from = self._deserializers[topic]
        versioned = isinstance(store, MeteredVersionedKeyValueStore)
        processor = self._processors.get(topic)
        applied = 0
        message = messages[0]
        completed = False
        try:
            for message in messages:
                timestamp = message.timestamp()[1]
                self.context.set_record_context(RecordContext(timestamp, topic, partition, message.offset()))
                try:
                    key, value = key_from(topic, message.key()), value_from(topic, message.value())
                except Exception as exc:
                    self._deserialization_failed(topic, message, exc)
                    continue
                if processor is not None:  # the user's processor decides, null keys included
                    processor.process(Record(key, value, timestamp, ()))
                elif key is None:
                    self._skip_null_key(topic, message)
                    continue
                elif versioned:
                    store.put(key, value, timestamp)
                else:
                    store.put(key, ValueAndTimestamp.make(value, timestamp))
                applied += 1
            completed = True
        finally:
            self._read_up_to(topic, partition, message, completed)
        return applied

    def _read_up_to(self, topic: str, partition: int, message: Message, completed: bool) -> None:
        """After a fetch: the partition's offset is past ``message`` when the fetch completed, at it
        (the record that failed) otherwise; the record context is ``message``'s."""
        offset = message.offset()
        self.offsets[(topic, partition)] = offset + 1 if completed else offset
        self.context.set_record_context(RecordContext(message.timestamp()[1], topic, partition, offset))

    def _deserialized(self, topic: str, message: Message) -> tuple[Any, Any] | None:
        """``message``'s key and value by the serdes' own deserializers (after a fast decoder refused
        it); if they raise, the handler decides: None to skip the record, or it fails the fetch."""
        key_from, value_from = self._deserializers[topic]
        try:
            return key_from(topic, message.key()), value_from(topic, message.value())
        except Exception as exc:
            self._deserialization_failed(topic, message, exc)
            return None

    def _deserialization_failed(self, topic: str, message: Message, exc: Exception) -> None:
        """Returns when the deserialization exception handler skips the record, else raises."""
        record = ConsumerRecord(topic, message.partition(), message.offset(), message.timestamp()[1],
                                message.key(), message.value(), tuple(message.headers() or ()))
        if self._handler.handle(self.context, record, exc) is HandlerResponse.CONTINUE:
            return
        raise SerializationError(
            f"Global store {self.by_topic[topic].name!r} could not deserialize record "
            f"{topic}-{record.partition}@{record.offset}: {exc}. Fix the serdes, or set "
            "default.deserialization.exception.handler to 'LogAndContinueExceptionHandler' to skip "
            "such records.") from exc

    @staticmethod
    def _skip_null_key(topic: str, message: Message) -> None:
        log.warning("Skipping a global table record with a null key (%s-%d@%d)",
                    topic, message.partition(), message.offset())

    def close(self) -> None:
        for processor in self._processors.values():
            processor.close()
        for store in self.stores.values():
            store.close()


def _reproduces_bytes(serde: Any, topic: str) -> bool:
    """Whether ``serde`` serializes what it deserialized back to the very bytes it read, for every
    input it reads: raw bytes, fixed-width integers, UTF-8 text (strict UTF-8 decodes one way only).
    Floats are left out (a NaN's payload need not survive)."""
    if type(serde) in (ByteArraySerde, ShortSerde, IntegerSerde, LongSerde):
        return True
    return (encoder_of(serde.serializer(), topic) is str.encode
            and decoder_of(serde.deserializer(), topic) is bytes.decode)


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
