"""Turns a Materialized into the timestamped key-value store builder a DSL operator uses."""

from __future__ import annotations

from typing import Any

from strom.streams.kstream.options import Materialized
from strom.streams.state.stores import Stores, TimestampedKeyValueStoreBuilder


def timestamped_store_builder(
    materialized: Materialized | None, store_name: str, key_serde: Any, value_serde: Any
) -> TimestampedKeyValueStoreBuilder:
    """RocksDB unless the Materialized names a supplier; caching and logging on unless disabled."""
    materialized = materialized or Materialized()
    supplier = materialized.store_supplier or Stores.persistent_timestamped_key_value_store(store_name)
    builder = Stores.timestamped_key_value_store_builder(
        supplier, materialized.key_serde or key_serde, materialized.value_serde or value_serde
    )
    if materialized.caching_enabled:
        builder.with_caching_enabled()
    else:
        builder.with_caching_disabled()
    if materialized.logging_enabled:
        builder.with_logging_enabled(materialized.topic_config)
    else:
        builder.with_logging_disabled()
    return builder
