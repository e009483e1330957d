"""Turns a Materialized into the store builder a table operator uses: timestamped key-value, or versioned
where the operator keeps a table's history (source tables, filter, map_values, transform_values,
table-table joins)."""

from __future__ import annotations

from functools import partial
from typing import Any

from strom.errors import TopologyError
from strom.streams.kstream.internals.dsl_stores import dsl_store_builder, key_value_supplier
from strom.streams.kstream.options import Materialized
from strom.streams.state.stores import KeyValueStoreBuilder, RocksDBVersionedStoreSupplier, Stores


def table_store_builder(
    materialized: Materialized | None, store_name: str, key_serde: Any, value_serde: Any,
    *, versioned_ok: bool = False,
) -> KeyValueStoreBuilder:
    """RocksDB unless the Materialized names a supplier; caching and logging on unless disabled (a
    versioned store has no cache, as in Kafka Streams)."""
    materialized = materialized or Materialized()
    key_serde, value_serde = materialized.key_serde or key_serde, materialized.value_serde or value_serde
    builder: KeyValueStoreBuilder
    supplier = materialized.store_supplier
    if isinstance(supplier, RocksDBVersionedStoreSupplier):
        if not versioned_ok:
            raise TopologyError(
                f"Store {supplier.name!r} is versioned, and only tables read from a topic "
                "(StreamsBuilder.table, KStream.to_table) or made by KTable filter, filter_not, map_values, "
                "transform_values and table-table joins keep a history; materialize this one with "
                "Stores.persistent_timestamped_key_value_store.")
        builder = Stores.versioned_key_value_store_builder(supplier, key_serde, value_serde)
    else:
        builder = dsl_store_builder(
            materialized, partial(key_value_supplier, store_name),
            lambda chosen: Stores.timestamped_key_value_store_builder(chosen, key_serde, value_serde))
        if materialized.caching_enabled:
            builder.with_caching_enabled()
        else:
            builder.with_caching_disabled()
    if materialized.logging_enabled:
        builder.with_logging_enabled(materialized.topic_config)
    else:
        builder.with_logging_disabled()
    return builder

