"""The topology wiring of global stores: ``StreamsBuilder.global_table`` and ``add_global_store`` record
a GlobalStoreSpec in the topology (no processor nodes: whoever runs the topology fills the stores)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.streams.kstream.global_table import GlobalKTable
from strom.streams.kstream.options import Consumed, Materialized, Named
from strom.streams.processor.api import Processor
from strom.streams.processor.internals.global_state import GlobalStoreSpec
from strom.streams.state.stores import KeyValueStoreBuilder, RocksDBVersionedStoreSupplier, Stores

if TYPE_CHECKING:
    from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder


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
    builder.internal.add_global_store(spec)
    return GlobalKTable(builder, spec)


def add_global_store(builder: InternalStreamsBuilder, store_builder: Any, topic: str,
                     consumed: Consumed | None, state_update_supplier: Callable[[], Processor]) -> None:
    """``StreamsBuilder.add_global_store``: every instance reads all of ``topic`` through a processor of
    its own (``state_update_supplier()``) that writes the store; any processor may read it."""
    consumed = consumed or Consumed()
    spec = GlobalStoreSpec(store_builder.name, topic, consumed.key_serde, consumed.value_serde, store_builder,
                           builder.node_name(Named(consumed.name), "KSTREAM-SOURCE-"),
                           builder.node_name(None, "KTABLE-SOURCE-"), state_update_supplier)
    builder.internal.add_global_store(spec)
