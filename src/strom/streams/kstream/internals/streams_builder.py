"""InternalStreamsBuilder: what every stream and table of one StreamsBuilder shares (Kafka's
kstream.internals.InternalStreamsBuilder)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.streams.kstream.internals.stateless import DropNullKeys
from strom.streams.kstream.kstream import KStream
from strom.streams.kstream.ktable import KTable
from strom.streams.kstream.options import Materialized, Named
from strom.streams.processor.internals.builder import InternalTopologyBuilder

if TYPE_CHECKING:
    from strom.streams.kstream.internals.table import KTableProcessorSupplier


@dataclass(frozen=True)
class RepartitionNodes:
    """The nodes of one repartition topic: ``filter`` (drops null keys) -> ``sink`` -> topic ->
    ``source``."""

    topic: str
    filter: str
    sink: str
    source: str


class InternalStreamsBuilder:
    """Shared by all streams and tables of one StreamsBuilder: the topology and Kafka's name counter.

    It makes the KStreams and KTables that operators wired in ``kstream.internals`` return
    (``new_stream``, ``new_table``), so those modules need not import the DSL types that call them.
    """

    def __init__(self) -> None:
        self.internal = InternalTopologyBuilder()
        self._index = 0
        # what topology.optimization needs to know of the DSL graph (kstream.internals.optimizer)
        self.table_sources: dict[str, str] = {}
        """KTableSource node -> the topic it reads."""
        self.key_changing: set[str] = set()
        self.value_changing: set[str] = set()
        self.optimizable_repartitions: list[RepartitionNodes] = []
        self.repartition_filters: list[str] = []
        """The null-key filter before every repartition topic."""
        self.null_key_joins: set[str] = set()
        """Left and outer joins, which join a record with a null key with None (KIP-962)."""
        """Repartition topics of grouping and joins (not of an explicit ``repartition()``), in order."""

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
        optimizable: bool = False,
    ) -> KStream:
        """Node ``parent`` → (drop null keys) → topic ``<base>-repartition`` → a new source in a new
        sub-topology. The returned stream no longer needs repartitioning. ``optimizable``: a grouping's
        or a join's, which ``merge.repartition.topics`` may merge with others after the same key change."""
        topic = f"{base}-repartition"
        self.internal.add_internal_topic(topic, partitions)
        filter_name = f"{base}-repartition-filter"
        sink_name = f"{base}-repartition-sink"
        source_name = f"{base}-repartition-source"
        self.internal.add_processor(filter_name, DropNullKeys, parent)
        self.repartition_filters.append(filter_name)
        self.internal.add_sink(
            sink_name,
            topic,
            filter_name,
            key_serde=key_serde,
            value_serde=value_serde,
            partitioner=partitioner,
        )
        self.internal.add_source(source_name, [topic], key_serde, value_serde)
        if optimizable:
            self.optimizable_repartitions.append(RepartitionNodes(topic, filter_name, sink_name, source_name))
        return KStream(self, source_name, key_serde, value_serde, False, frozenset({topic}))
