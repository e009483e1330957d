"""KTable-KTable foreign-key joins, inner and left (Kafka's KIP-213 subscription/response protocol).

The left table (primary key ``pk``) extracts a foreign key ``fk`` from each value; the right table is
keyed by ``fk``. Four steps, meeting only through two internal topics so each side stays in its own
partitioning:
1. the left side sends a subscription (fk -> pk, hash of the left value, instruction) to the
   subscription topic, partitioned by fk like the right table;
2. the right side keeps subscriptions in a store and answers each with the current right value;
3. a right-table update answers every subscriber of its fk again;
4. answers travel on the response topic, partitioned by pk; the left side drops answers whose hash no
   longer matches its current value (stale) and forwards ``joiner(left, right)`` (left join: with None
   when there is no right value; inner: a tombstone).
All payloads on the internal topics are bytes laid out here; keys are the serialized pk / fk.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.kafka.serdes import Serdes
from strom.streams.kstream.change import Change
from strom.streams.kstream.internals.dsl_stores import dsl_store_builder, key_value_supplier
from strom.streams.kstream.internals.functions import value_function
from strom.streams.kstream.internals.join_kind import JoinKind
from strom.streams.kstream.internals.table import KTableProcessorSupplier, KTableSource
from strom.streams.kstream.internals.table_table_join import check_same_builder
from strom.streams.kstream.internals.value_getter import ValueGetter
from strom.streams.kstream.join_options import TableJoined, ValueJoiner, value_joiner
from strom.streams.kstream.options import Materialized, Named
from strom.streams.processor.api import Processor, Record
from strom.streams.processor.partitioner import StreamPartitioner, partition_chooser
from strom.streams.state.stores import Stores

if TYPE_CHECKING:
    from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder
    from strom.streams.kstream.ktable import KTable

_LENGTH = struct.Struct(">i")
HASH_SIZE = 16


class Instruction(enum.IntEnum):
    DELETE_KEY_NO_PROPAGATE = 0
    DELETE_KEY_AND_PROPAGATE = 1
    PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = 2
    PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = 3


def value_hash(data: bytes | None) -> bytes | None:
    return None if data is None else hashlib.blake2b(data, digest_size=HASH_SIZE).digest()


def _optional(data: bytes | None) -> bytes:
    return b"\x00" if data is None else b"\x01" + data


def encode_subscription(instruction: Instruction, hashed: bytes | None, pk: bytes) -> bytes:
    return bytes([instruction]) + _optional(hashed) + pk


def decode_subscription(data: bytes) -> tuple[Instruction, bytes | None, bytes]:
    instruction = Instruction(data[0])
    if data[1]:
        return instruction, data[2:2 + HASH_SIZE], data[2 + HASH_SIZE:]
    return instruction, None, data[2:]


def encode_response(hashed: bytes | None, foreign_value: bytes | None) -> bytes:
    return _optional(hashed) + _optional(foreign_value)


def decode_response(data: bytes) -> tuple[bytes | None, bytes | None]:
    hashed, position = (data[1:1 + HASH_SIZE], 1 + HASH_SIZE) if data[0] else (None, 1)
    return hashed, (data[position + 1:] if data[position] else None)


def subscription_prefix(fk: bytes) -> bytes:
    return _LENGTH.pack(len(fk)) + fk


def subscription_key(fk: bytes, pk: bytes) -> bytes:
    return subscription_prefix(fk) + pk


class _Serdes:
    """Serdes resolved at init: given ones, else the application's defaults."""

    def __init__(self, context: Any, pk: Any, fk: Any, left_value: Any, right_value: Any) -> None:
        task = context.task
        self.pk = pk or task.key_serde
        self.fk = fk or task.key_serde
        self.left_value = left_value or task.value_serde
        self.right_value = right_value or task.value_serde


class SubscriptionSend(Processor):
    """Left side, step 1: turns each left update into subscription messages (key: fk bytes)."""

    def __init__(self, extractor: Callable[[Any, Any], Any], left_join: bool,
                 serdes: tuple[Any, Any, Any, Any], sink: str) -> None:
        self.extractor = extractor  # (key, value) -> foreign key (KIP-1104)
        self.left_join = left_join
        self.serde_config = serdes
        self.sink = sink

    def init(self, context: Any) -> None:
        self.context = context
        self.serdes = _Serdes(context, *self.serde_config)

    def _fk_bytes(self, key: Any, value: Any) -> bytes | None:
        fk = None if value is None else self.extractor(key, value)
        return None if fk is None else self.serdes.fk.serializer().serialize(None, fk)

    def process(self, record: Record) -> None:
        change: Change = record.value
        new, old = change.new_value, change.old_value
        if (new is None and old is None) or not change.is_latest:  # (a versioned table's out-of-order update)
            return
        pk = self.serdes.pk.serializer().serialize(None, record.key)
        hashed = value_hash(self.serdes.left_value.serializer().serialize(None, new))
        new_fk, old_fk = self._fk_bytes(record.key, new), self._fk_bytes(record.key, old)
        if self.left_join:
            # as Kafka's: leave the old fk silently; the new one (None too: no foreign key, or a deletion)
            # answers, with None when it has no right value (a None fk answers at the record's time)
            if old_fk is not None and old_fk != new_fk:
                self._send(record, old_fk, Instruction.DELETE_KEY_NO_PROPAGATE, hashed, pk)
            self._send(record, new_fk, Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE, hashed, pk)
            return
        if old_fk is not None and old_fk != new_fk:
            # the old fk answers (with no right value) only when no new subscription will answer
            instruction = Instruction.DELETE_KEY_NO_PROPAGATE if new_fk is not None \
                else Instruction.DELETE_KEY_AND_PROPAGATE
            self._send(record, old_fk, instruction, hashed, pk)
        if new_fk is not None:
            moved = old_fk is not None and old_fk != new_fk
            propagate = Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE if moved \
                else Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE
            self._send(record, new_fk, propagate, hashed, pk)

    def _send(self, record: Record, fk: bytes | None, instruction: Instruction, hashed: bytes | None,
              pk: bytes) -> None:
        self.context.forward(Record(fk, encode_subscription(instruction, hashed, pk), record.timestamp,
                                    record.raw_headers), self.sink)


class SubscriptionReceive(Processor):
    """Right side, step 2: stores subscriptions and answers them with the right value (key: pk bytes)."""

    def __init__(self, subscription_store: str, right: ValueGetter,
                 serdes: tuple[Any, Any, Any, Any]) -> None:
        self.subscription_store_name = subscription_store
        self.right = right
        self.serde_config = serdes

    def init(self, context: Any) -> None:
        self.context = context
        self.serdes = _Serdes(context, *self.serde_config)
        self.subscriptions = context.get_state_store(self.subscription_store_name)
        self.right.init(context)

    def close(self) -> None:
        self.right.close()

    def process(self, record: Record) -> None:
        fk_bytes: bytes | None = record.key
        instruction, hashed, pk = decode_subscription(record.value)
        if fk_bytes is None:  # a left join's row without a foreign key: answered with None, not stored
            self.context.forward(Record(pk, encode_response(hashed, None), record.timestamp,
                                        record.raw_headers))
            return
        key = subscription_key(fk_bytes, pk)
        if instruction in (Instruction.DELETE_KEY_NO_PROPAGATE, Instruction.DELETE_KEY_AND_PROPAGATE):
            self.subscriptions.delete(key)
        else:
            self.subscriptions.put(key, _optional(hashed))
        if instruction is Instruction.DELETE_KEY_NO_PROPAGATE:
            return
        current = self.right.get(self.serdes.fk.deserializer().deserialize(None, fk_bytes))
        if instruction is Instruction.DELETE_KEY_AND_PROPAGATE:
            foreign = None
        else:
            if current is None and instruction is Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE:
                return
            foreign = None if current is None else \
                self.serdes.right_value.serializer().serialize(None, current.value)
        timestamp = record.timestamp if current is None else max(record.timestamp, current.timestamp)
        self.context.forward(Record(pk, encode_response(hashed, foreign), timestamp, record.raw_headers))


class ForeignTableChange(Processor):
    """Right side, step 3: a right-table update answers every subscriber of its key again, a deletion of
    a key the table did not have too (as Kafka's ForeignTableJoinProcessor)."""

    def __init__(self, subscription_store: str, serdes: tuple[Any, Any, Any, Any]) -> None:
        self.subscription_store_name = subscription_store
        self.serde_config = serdes

    def init(self, context: Any) -> None:
        self.context = context
        self.serdes = _Serdes(context, *self.serde_config)
        self.subscriptions = context.get_state_store(self.subscription_store_name)

    def process(self, record: Record) -> None:
        change: Change = record.value
        if not change.is_latest:
            return  # a versioned table's out-of-order update (KIP-914)
        fk = self.serdes.fk.serializer().serialize(None, record.key)
        foreign = self.serdes.right_value.serializer().serialize(None, change.new_value)
        prefix = subscription_prefix(fk)
        for key, stored_hash in self.subscriptions.prefix_scan(prefix, Serdes.ByteArray()):
            hashed = stored_hash[1:] if stored_hash[0] else None
            self.context.forward(Record(key[len(prefix):], encode_response(hashed, foreign), record.timestamp,
                                        record.raw_headers))


class ResponseJoin(Processor):
    """Left side, step 4: joins a fresh answer with the current left value, drops stale ones."""

    def __init__(self, left: ValueGetter, joiner: ValueJoiner, left_join: bool,
                 serdes: tuple[Any, Any, Any, Any]) -> None:
        self.left = left
        self.joiner = joiner
        self.left_join = left_join
        self.serde_config = serdes

    def init(self, context: Any) -> None:
        self.context = context
        self.serdes = _Serdes(context, *self.serde_config)
        self.left.init(context)

    def close(self) -> None:
        self.left.close()

    def process(self, record: Record) -> None:
        hashed, foreign_bytes = decode_response(record.value)
        pk = self.serdes.pk.deserializer().deserialize(None, record.key)
        current = self.left.get(pk)
        current_value = None if current is None else current.value
        current_hash = value_hash(self.serdes.left_value.serializer().serialize(None, current_value))
        if current_hash != hashed:
            return  # the left value changed since this subscription: a newer answer follows
        foreign = None if foreign_bytes is None else \
            self.serdes.right_value.deserializer().deserialize(None, foreign_bytes)
        if foreign is None and (not self.left_join or current_value is None):
            result = None
        else:
            result = self.joiner(pk, current_value, foreign)
        self.context.forward(Record(pk, result, record.timestamp, record.raw_headers))


def foreign_key_join(left: KTable, right: KTable, kind: JoinKind, foreign_key_extractor: Callable[..., Any],
                     joiner: Callable[..., Any], named: Named | TableJoined | None = None,
                     materialized: Materialized | None = None) -> KTable:
    """Join each left row with the right row whose key ``foreign_key_extractor(left value)`` (or
    ``foreign_key_extractor(left key, left value)``, KIP-1104) names: the four steps above as nodes, two
    internal topics and a subscription store. A TableJoined in the place of ``named`` gives the tables'
    partitioners, which place the internal topics' records as the tables' own."""
    if kind is JoinKind.OUTER:
        raise TopologyError("Foreign-key joins are inner or left; outer_join joins on the primary key.")
    if isinstance(named, Materialized) and materialized is None:  # join(other, fk, joiner, Materialized)
        named, materialized = None, named
    check_same_builder(left, right)
    extract = value_function(foreign_key_extractor, "a foreign-key join's foreign_key_extractor")
    fn = value_joiner(joiner, "KTable foreign-key join")
    table_joined = named if isinstance(named, TableJoined) else TableJoined()
    if isinstance(named, TableJoined):
        named = Named(named.name)
    subscription_partitioner = _key_partitioner(table_joined.other_partitioner, right.key_serde,
                                                "other_partitioner")
    response_partitioner = _key_partitioner(table_joined.partitioner, left.key_serde, "partitioner")
    builder = left.builder
    b = builder.internal
    base = named.name if named is not None and named.name else f"KTABLE-FK-JOIN-{builder.next_index()}"
    left.enable_send_old_values()
    right.enable_send_old_values()
    left_values, right_values = left.value_getter(), right.value_getter()
    serdes = (left.key_serde, right.key_serde, left.value_serde, right.value_serde)
    subscription_topic, response_topic, subscription_store = _names(builder, named)
    send, result = f"{base}-subscription-send", f"{base}-result"
    left_join = kind is JoinKind.LEFT
    for topic in (subscription_topic, response_topic):
        b.add_internal_topic(topic)
    bytes_serde = Serdes.ByteArray()
    b.add_processor(send, lambda: SubscriptionSend(extract, left_join, serdes, f"{base}-subscription-sink"),
                    left.name)
    b.add_sink(f"{base}-subscription-sink", subscription_topic, send, key_serde=bytes_serde,
               value_serde=bytes_serde, partitioner=subscription_partitioner)
    b.add_source(f"{base}-subscription-source", [subscription_topic], bytes_serde, bytes_serde)
    subscriptions = dsl_store_builder(
        None, partial(key_value_supplier, subscription_store),
        lambda chosen: Stores.key_value_store_builder(chosen, bytes_serde, bytes_serde))
    b.add_state_store(subscriptions.with_caching_disabled())
    b.add_processor(f"{base}-subscription-receive",
                    lambda: SubscriptionReceive(subscription_store, right_values.get(), serdes),
                    f"{base}-subscription-source")
    b.connect_processor_and_state_stores(f"{base}-subscription-receive", subscription_store,
                                         *right_values.store_names)
    b.add_processor(f"{base}-foreign-table-change", lambda: ForeignTableChange(subscription_store, serdes),
                    right.name)
    b.connect_processor_and_state_stores(f"{base}-foreign-table-change", subscription_store)
    b.add_sink(f"{base}-response-sink", response_topic, f"{base}-subscription-receive",
               f"{base}-foreign-table-change", key_serde=bytes_serde, value_serde=bytes_serde,
               partitioner=response_partitioner)
    b.add_source(f"{base}-response-source", [response_topic], bytes_serde, bytes_serde)
    b.add_processor(f"{base}-response-join", lambda: ResponseJoin(left_values.get(), fn, left_join, serdes),
                    f"{base}-response-source")
    b.connect_processor_and_state_stores(f"{base}-response-join", *left_values.store_names)
    b.copartition(right.source_topics | {subscription_topic})
    b.copartition(left.source_topics | {response_topic})
    # As Kafka's, the result is stored only under a name the user gave (its KTableSource is queryable then);
    # else when an operator reads its values or needs old ones, in a store built as ``materialized`` says
    # (a KTableSource, as Kafka's: a stored result forwards the value it replaces as the old one)
    supplier = KTableProcessorSupplier(KTableSource, None)
    b.add_processor(result, supplier, f"{base}-response-join")
    value_serde = None if materialized is None else materialized.value_serde
    table = builder.new_table(result, supplier, left.key_serde, value_serde, None,
                              source_topics=left.source_topics)
    if materialized is not None and materialized.store_name is not None:
        table.materialize(materialized, materialized.store_name)
    else:
        table.store_when_needed(lambda: table.materialize(materialized, builder.store_name(None, f"{base}-")))
    return table


def _key_partitioner(partitioner: Any, key_serde: Any, which: str) -> KeyBytesPartitioner | None:
    """A TableJoined partitioner for an internal topic of serialized keys; None stays the default."""
    if partitioner is None:
        return None
    if key_serde is None:
        raise TopologyError(f"TableJoined's {which} needs the table's key serde to read keys: give the "
                            "table one (Consumed.with_ or Materialized.with_key_serde).")
    return KeyBytesPartitioner(partitioner, key_serde)


def _names(builder: InternalStreamsBuilder, named: Named | None) -> tuple[str, str, str]:
    """Kafka's names of the subscription topic, response topic and subscription store: from the join's
    name, else ``KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>-topic`` and so on."""
    if named is not None and named.name:
        return (f"{named.name}-subscription-registration-topic", f"{named.name}-subscription-response-topic",
                f"{named.name}-subscription-store")
    return (f"KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-{builder.next_index()}-topic",
            f"KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-{builder.next_index()}-topic",
            f"KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-{builder.next_index()}")


class KeyBytesPartitioner(StreamPartitioner):
    """A TableJoined partitioner on an internal topic whose keys are serialized (the foreign key on the
    subscription topic, the primary key on the response topic): the user's partitioner sees the key."""

    def __init__(self, partitioner: Any, key_serde: Any) -> None:
        self.choose = partition_chooser(partitioner)
        self.key_deserializer = key_serde.deserializer()

    def partitions(self, topic: str, key: Any, value: Any, num_partitions: int) -> set[int] | None:
        return self.choose(topic, self.key_deserializer.deserialize(topic, key), None,
                           lambda _topic: num_partitions)
