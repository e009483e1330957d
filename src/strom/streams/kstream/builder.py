"""StreamsBuilder: the DSL entry point. It writes processors straight into an InternalTopologyBuilder."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from strom.streams.config import DEFAULT_DSL_STORE, TOPOLOGY_OPTIMIZATION, StreamsConfig, optimization_rules
from strom.streams.kstream.global_table import GlobalKTable
from strom.streams.kstream.internals.dsl_stores import apply_default_dsl_store
from strom.streams.kstream.internals.global_store import add_global_store, global_table
from strom.streams.kstream.internals.optimizer import keep_null_keys_for_joins, optimize
from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder
from strom.streams.kstream.kstream import KStream
from strom.streams.kstream.ktable import KTable, source_table
from strom.streams.kstream.options import Consumed, Materialized, Named, StoreType
from strom.streams.processor.api import Processor
from strom.streams.processor.internals.builder import pattern_member
from strom.streams.processor.topology import Topology

__all__ = [
    "StreamsBuilder",
]


class StreamsBuilder:
    """Builds a topology with the DSL: ``stream``/``table`` sources, operators, ``build()``."""

    def __init__(self) -> None:
        self.builder = InternalStreamsBuilder()

    def stream(self, topics: str | list[str] | re.Pattern[str], consumed: Consumed | None = None) -> KStream:
        """A stream of one topic, several topics, or every topic a compiled pattern fully matches
        (Kafka's ``Pattern`` sources: the topics are found when the application starts)."""
        consumed = consumed or Consumed()
        name = self.builder.node_name(Named(consumed.name), "KSTREAM-SOURCE-")
        if isinstance(topics, re.Pattern):
            subscription: re.Pattern[str] | list[str] = topics
            source_topics = frozenset({pattern_member(name)})
        else:
            subscription = [topics] if isinstance(topics, str) else list(topics)
            source_topics = frozenset(subscription)
        self.builder.internal.add_source(name, subscription, consumed.key_serde, consumed.value_serde,
                                         consumed.timestamp_extractor, consumed.offset_reset_policy)
        return KStream(self.builder, name, consumed.key_serde, consumed.value_serde, False, source_topics)

    def table(
        self,
        topic: str,
        consumed: Consumed | Materialized | None = None,
        materialized: Materialized | None = None,
    ) -> KTable:
        """``table(topic)``, ``table(topic, Consumed)``, ``table(topic, Materialized)`` or
        ``table(topic, Consumed, Materialized)``, as Kafka's overloads."""
        if isinstance(consumed, Materialized) and materialized is None:
            consumed, materialized = None, consumed
        return source_table(self.builder, topic, consumed or Consumed(), materialized)

    def global_table(
        self, topic: str, consumed: Consumed | None = None, materialized: Materialized | None = None
    ) -> GlobalKTable:
        """A table of every partition of ``topic``, replicated to every task (restored from the topic)."""
        return global_table(self.builder, topic, consumed, materialized)

    def add_global_store(self, store_builder: Any, topic: str, consumed: Consumed | None,
                         state_update_supplier: Callable[[], Processor]) -> StreamsBuilder:
        """A global store filled from every partition of ``topic`` by ``state_update_supplier()``, a
        processor that writes it (it sees every record, null keys included, also when the store is
        rebuilt from the topic); every processor may read the store by name."""
        add_global_store(self.builder, store_builder, topic, consumed, state_update_supplier)
        return self

    def add_state_store(self, store_builder: Any) -> StreamsBuilder:
        """Adds a store for Processor API steps (``KStream.process(supplier, store_name)``)."""
        self.builder.internal.add_state_store(store_builder)
        return self

    def build(self, props: Mapping[str, Any] | StreamsConfig | None = None) -> Topology:
        """The topology. ``props`` (optional) is validated now so mistakes surface early; its
        ``default.dsl.store`` picks the store of every DSL operator whose Materialized chose none, its
        ``topology.optimization`` rewrites the topology (optimizer.py), as Kafka's ``build(props)``."""
        config = None if props is None else StreamsConfig(props)
        if config is not None:
            optimize(self.builder, optimization_rules(config[TOPOLOGY_OPTIMIZATION]))
        keep_null_keys_for_joins(self.builder)
        store_type = StoreType(config[DEFAULT_DSL_STORE]) if config is not None else StoreType.ROCKS_DB
        apply_default_dsl_store(self.builder.internal.store_builders.values(), store_type)
        return Topology(self.builder.internal, store_type.value)
