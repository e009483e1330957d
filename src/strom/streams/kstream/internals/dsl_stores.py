"""The inner store a DSL operator gets when its Materialized names no supplier: the Materialized's
StoreType, else ``default.dsl.store``, which ``StreamsBuilder.build(props)`` applies (Kafka's KIP-591)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from strom.streams.kstream.options import Materialized, StoreType
from strom.streams.state.stores import KeyValueBytesStoreSupplier, Stores

SupplierFactory = Callable[[StoreType], Any]
"""Makes the operator's store supplier for a store type (its name, retention and window size bound)."""


def dsl_store_builder(materialized: Materialized | None, factory: SupplierFactory,
                      make_builder: Callable[[Any], Any]) -> Any:
    """``make_builder(supplier)`` over the Materialized's supplier, else over one of its StoreType, else over
    one of ``default.dsl.store`` (RocksDB until ``build(props)`` says otherwise)."""
    explicit = materialized.store_supplier if materialized is not None else None
    if explicit is not None:
        return make_builder(explicit)
    store_type = materialized.store_type if materialized is not None else None
    store_builder = make_builder(factory(store_type or StoreType.ROCKS_DB))
    if store_type is None:
        store_builder.dsl_default_supplier = factory
    return store_builder


def apply_default_dsl_store(store_builders: Iterable[Any], store_type: StoreType) -> None:
    """Gives every DSL store that chose no type of its own a supplier of ``store_type``."""
    for store_builder in store_builders:
        factory = getattr(store_builder, "dsl_default_supplier", None)
        if factory is not None:
            store_builder.supplier = factory(store_type)


def key_value_supplier(store_name: str, store_type: StoreType) -> KeyValueBytesStoreSupplier:
    if store_type is StoreType.IN_MEMORY:
        return Stores.in_memory_key_value_store(store_name)
    return Stores.persistent_key_value_store(store_name)
