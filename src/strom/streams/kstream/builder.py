"""StreamsBuilder: the DSL entry point. It writes processors straight into an InternalTopologyBuilder."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from strom.streams.config import DEFAULT_DSL_STORE, StreamsConfig
from strom.streams.kstream.global_table import GlobalKTable
from strom.streams.kstream.internals.dsl_stores import apply_default_dsl_store
from strom.streams.kstream.internals.global_store import add_global_store, global_table
from strom.streams.kstream.internals.stateless import DropNullKeys
from strom.streams.kstream.kstream import KStream
from strom.streams.kstream.ktable import KTable, source_table
from strom.streams.kstream.options import Consumed, Materialized, Named, StoreType
from strom.streams.processor.api import Processor
from strom.streams.processor.internals.builder import InternalTopologyBuilder, pattern_member
from strom.streams.processor.topology import Topology

if TYPE_CHECKING:
    from strom.streams.kstream.internals.table import KTableProcessorSupplier

__all__ = [
    "StreamsBuilder",
]


class InternalStreamsBuilder:
    """Shared by all streams and tables of one StreamsBuilder: the topology and Kafka's name counter.

    It makes the KStreams and KTables that operators wired in ``kstream.internals`` return
    (``new_stream``, ``new_table``), so those modules need not import the DSL types that call them.
    """

    def __init__(self) -> None:
        self.internal = InternalTopologyBuilder()
        self._index = 0

    def next_index(self) -> str:
        index = f"{self._index:010d}"
        self._index += 1
        return index

    def node_name(self, named: Named | None, prefix: str) -> str:
        """The user's name if given, else Kafka Streams' generated ``<PREFIX><10-digit index>``."""
        if named is not None and named.name:
            return named.name
        return prefix + self.next_index()

    def store_name(self, materialized: Materialized | None, prefix: str) -> str:
        if materialized is not None and materialized.store_name:
            return materialized.store_name
        return f"{prefix}STATE-STORE-{self.next_index()}"

    def new_stream(self, name: str, key_serde: Any, value_serde: Any, repartition_required: bool = False,
                   source_topics: frozenset[str] = frozenset()) -> KStream:
        """The KStream of node ``name``."""
        return KStream(self, name, key_serde, value_serde, repartition_required, source_topics)

    def new_table(self, name: str, supplier: KTableProcessorSupplier, key_serde: Any, value_serde: Any,
                  queryable_store_name: str | None, parent: KTable | None = None,
                  source_topics: frozenset[str] = frozenset()) -> KTable:
        """The KTable of node ``name`` (a table processor made by ``supplier``)."""
        return KTable(self, name, supplier, key_serde, value_serde, queryable_store_name, parent,
                      source_topics)

    def require_copartitioned(self, source_topics: frozenset[str]) -> None:
        """State read by key across several source topics (e.g. an aggregation after a merge) is only
        right when every key lands in the same task: the topics must have equal partition counts."""
        if len(source_topics) > 1 or any(map(self.internal.stands_for_several_topics, source_topics)):
            self.internal.copartition(source_topics)

    def connect_stores(
        self, processor: str, store_names: tuple[str, ...], source_topics: frozenset[str]
    ) -> None:
        """Gives a Processor API step its stores; it reads them by key, so its input topics must be
        co-partitioned."""
        if store_names:
            self.require_copartitioned(source_topics)
            self.internal.connect_processor_and_state_stores(processor, *store_names)

    def repartition(
        self,
        parent: str,
        base: str,
        key_serde: Any,
        value_serde: Any,
        partitions: int | None = None,
        partitioner: Any = None,
    ) -> KStream:
        """Node ``parent`` → (drop null keys) → topic ``<base>-repartition`` → a new source in a new
        sub-topology. The returned stream no longer needs repartitioning."""
        topic = f"{base}-repartition"
        self.internal.add_internal_topic(topic, partitions)
        filter_name = f"{base}-repartition-filter"
        sink_name = f"{base}-repartition-sink"
        source_name = f"{base}-repartition-source"
        self.internal.add_processor(filter_name, DropNullKeys, parent)
        self.internal.add_sink(
            sink_name,
            topic,
            filter_name,
            key_serde=key_serde,
            value_serde=value_serde,
            partitioner=partitioner,
        )
        self.internal.add_source(source_name, [topic], key_serde, value_serde)
        return KStream(self, source_name, key_serde, value_serde, False, frozenset({topic}))


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
        ``default.dsl.store`` picks the store of every DSL operator whose Materialized chose none."""
        config = None if props is None else StreamsConfig(props)
        store_type = StoreType(config[DEFAULT_DSL_STORE]) if config is not None else StoreType.ROCKS_DB
        apply_default_dsl_store(self.builder.internal.store_builders.values(), store_type)
        return Topology(self.builder.internal, store_type.value)
