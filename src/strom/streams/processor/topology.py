"""Topology (the Processor API entry point) and TopologyDescription, printed as Kafka Streams prints it."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from strom.errors import TopologyError
from strom.streams.config import DEFAULT_DSL_STORE, StreamsConfig
from strom.streams.processor import topology_graph
from strom.streams.processor.api import AutoOffsetReset, ProcessorSupplier
from strom.streams.processor.internals.builder import (
    InternalTopologyBuilder,
    ProcessorNodeFactory,
    SinkNodeFactory,
    SourceNodeFactory,
    TopicExtractor,
)
from strom.streams.processor.internals.global_state import GlobalStoreSpec

__all__ = [
    "GlobalStoreDescription",
    "NodeDescription",
    "SubtopologyDescription",
    "Topology",
    "TopologyDescription",
]

log = logging.getLogger(__name__)

@dataclass
class NodeDescription:
    name: str
    kind: str  # "Source" | "Processor" | "Sink"
    detail: str
    successors: list[str] = field(default_factory=list)
    predecessors: list[str] = field(default_factory=list)
    size: int = 1
    topics: list[str] = field(default_factory=list)
    """A source's topics (or its pattern), a sink's topic (none for a topic extractor)."""
    stores: list[str] = field(default_factory=list)
    """A processor's state stores."""

    def __str__(self) -> str:
        text = f"{self.kind}: {self.name} ({self.detail})\n"
        if self.kind != "Sink":
            text += f"      --> {', '.join(self.successors) or 'none'}\n"
        if self.kind != "Source":
            text += f"      <-- {', '.join(self.predecessors) or 'none'}\n"
        return text


@dataclass
class SubtopologyDescription:
    id: int
    nodes: list[NodeDescription]
    global_store: bool = False

    def __str__(self) -> str:
        suffix = " for global store (will not generate tasks)" if self.global_store else ""
        return f"Sub-topology: {self.id}{suffix}\n" + "".join(f"    {node}" for node in self.nodes) + "\n"


@dataclass(frozen=True)
class GlobalStoreDescription:
    """Kafka's TopologyDescription.GlobalStore: the source and the processor that fill a global store."""

    id: int
    source: NodeDescription
    processor: NodeDescription


@dataclass
class TopologyDescription:
    subtopologies: list[SubtopologyDescription]
    """Every sub-topology as printed, the global stores' last (numbered after the task ones)."""

    def global_stores(self) -> list[GlobalStoreDescription]:
        """The global stores (Kafka's ``globalStores()``), in sub-topology order."""
        return [GlobalStoreDescription(sub.id, sub.nodes[0], sub.nodes[1])
                for sub in self.subtopologies if sub.global_store]

    def to_mermaid(self) -> str:
        """A Mermaid flowchart: sub-topologies as subgraphs, topics and stores as their own nodes."""
        return topology_graph.to_mermaid(self)

    def to_dot(self) -> str:
        """A Graphviz digraph: sub-topologies as clusters, topics and stores as their own nodes."""
        return topology_graph.to_dot(self)

    def __str__(self) -> str:
        """Byte for byte as Kafka Streams prints it (including its odd indentation: the first
        sub-topology line has three leading spaces, the others two)."""
        return "Topologies:\n " + "".join(f"  {s}" for s in self.subtopologies)


class Topology:
    """A processor graph built by hand (Processor API) or by StreamsBuilder.build()."""

    def __init__(self, internal: InternalTopologyBuilder | None = None,
                 default_dsl_store: str | None = None) -> None:
        self.internal = internal or InternalTopologyBuilder()
        self.default_dsl_store = default_dsl_store
        """The ``default.dsl.store`` the DSL's stores were built with (None: not built by the DSL)."""

    def check_config(self, config: StreamsConfig) -> None:
        """Warns when the config running the topology sets a ``default.dsl.store`` it was not built with:
        the DSL chooses stores in ``StreamsBuilder.build(props)``, so the setting has no effect here."""
        wanted = config.originals.get(DEFAULT_DSL_STORE)
        if self.default_dsl_store is not None and wanted is not None and wanted != self.default_dsl_store:
            log.warning("The topology was built with default.dsl.store=%s; this config's %r applies only "
                        "when passed to StreamsBuilder.build(props).", self.default_dsl_store, wanted)

    def add_source(
        self,
        name: str,
        *topics: str | re.Pattern[str],
        key_serde: Any = None,
        value_serde: Any = None,
        timestamp_extractor: Any = None,
        offset_reset: AutoOffsetReset | None = None,
    ) -> Topology:
        """A source of the named topics, or of every topic one compiled pattern matches; ``offset_reset``
        where it starts without a committed offset (default: the ``auto.offset.reset`` config)."""
        patterns = [t for t in topics if isinstance(t, re.Pattern)]
        if patterns and len(topics) > 1:
            raise TopologyError(f"Source {name!r} reads either named topics or one pattern, got {topics!r}.")
        subscription = patterns[0] if patterns else topics
        self.internal.add_source(name, subscription, key_serde, value_serde, timestamp_extractor,
                                 offset_reset)
        return self

    def add_processor(self, name: str, supplier: ProcessorSupplier, *parent_names: str) -> Topology:
        self.internal.add_processor(name, supplier, *parent_names)
        return self

    def add_sink(
        self,
        name: str,
        topic: str | TopicExtractor,
        *parent_names: str,
        key_serde: Any = None,
        value_serde: Any = None,
        partitioner: Any = None,
    ) -> Topology:
        self.internal.add_sink(
            name, topic, *parent_names, key_serde=key_serde, value_serde=value_serde, partitioner=partitioner
        )
        return self

    def add_state_store(self, store_builder: Any, *processor_names: str) -> Topology:
        self.internal.add_state_store(store_builder, *processor_names)
        return self

    def add_global_store(self, store_builder: Any, source_name: str, key_serde: Any, value_serde: Any,
                         topic: str, processor_name: str,
                         state_update_supplier: ProcessorSupplier) -> Topology:
        """Kafka's ``addGlobalStore``: every instance reads all of ``topic`` (source ``source_name``, with
        these serdes) through its own ``state_update_supplier()`` processor (``processor_name``), which
        writes the store; any processor reads it by name. The store has logging disabled: the topic is
        its changelog."""
        self.internal.add_global_store(GlobalStoreSpec(store_builder.name, topic, key_serde, value_serde,
                                                       store_builder, source_name, processor_name,
                                                       state_update_supplier))
        return self

    def add_read_only_state_store(self, store_builder: Any, source_name: str, timestamp_extractor: Any,
                                  key_deserializer: Any, value_deserializer: Any, topic: str,
                                  processor_name: str, state_update_supplier: ProcessorSupplier) -> Topology:
        """Kafka's ``addReadOnlyStateStore`` (KIP-813): a task store (one per partition of ``topic``) that
        processor ``processor_name`` (made by ``state_update_supplier``) fills from source ``source_name``
        (from the earliest offset). ``topic`` is its changelog: logging is disabled, and a task restores
        it from ``topic`` up to its committed offset. Other processors of the sub-topology read it.
        The deserializers may be serdes; ``timestamp_extractor`` None means the default one."""
        store_builder.with_logging_disabled()
        self.internal.add_source(source_name, [topic], _as_serde(key_deserializer),
                                 _as_serde(value_deserializer), timestamp_extractor, AutoOffsetReset.EARLIEST)
        self.internal.add_processor(processor_name, state_update_supplier, source_name)
        self.internal.add_state_store(store_builder, processor_name)
        self.internal.connect_source_store_and_topic(store_builder.name, topic)
        return self

    def connect_processor_and_state_stores(self, processor_name: str, *store_names: str) -> Topology:
        self.internal.connect_processor_and_state_stores(processor_name, *store_names)
        return self

    def describe(self) -> TopologyDescription:
        return describe(self.internal)

    def __str__(self) -> str:
        return str(self.describe())


def describe(builder: InternalTopologyBuilder) -> TopologyDescription:
    subtopologies = []
    for plan in builder.subtopologies():
        nodes = {name: _describe_node(builder, name) for name in plan.nodes}
        _fill_sizes(nodes)
        order = sorted(nodes.values(), key=_node_order)
        for node in order:
            node.successors = [n.name for n in sorted((nodes[s] for s in node.successors), key=_node_order)]
            node.predecessors = [
                n.name for n in sorted((nodes[p] for p in node.predecessors), key=_node_order)
            ]
        subtopologies.append(SubtopologyDescription(plan.id, order))
    for spec in builder.global_stores.values():  # numbered after the task sub-topologies
        source = NodeDescription(spec.source_name, "Source", f"topics: [{spec.topic}]", [spec.processor_name],
                                 topics=[spec.topic])
        table = NodeDescription(
            spec.processor_name, "Processor", f"stores: [{spec.name}]", [], [spec.source_name],
            stores=[spec.name],
        )
        subtopologies.append(SubtopologyDescription(len(subtopologies), [source, table], global_store=True))
    return TopologyDescription(subtopologies)


@dataclass(frozen=True)
class _DeserializingSerde:
    """A source reads through a serde's deserializer: a bare deserializer given where Kafka takes one."""

    wrapped: Any

    def deserializer(self) -> Any:
        return self.wrapped

    def serializer(self) -> Any:
        raise TopologyError("A source's deserializer cannot serialize.")


def _as_serde(deserializer: Any) -> Any:
    if deserializer is None or hasattr(deserializer, "deserializer"):
        return deserializer
    return _DeserializingSerde(deserializer)


def _node_order(node: NodeDescription) -> tuple[int, str]:
    """Kafka Streams' order: larger sub-trees first, then by name."""
    return (-node.size, node.name)


def _describe_node(builder: InternalTopologyBuilder, name: str) -> NodeDescription:
    factory = builder.nodes[name]
    children = builder.children(name)
    if isinstance(factory, SourceNodeFactory):
        topics = [factory.pattern.pattern] if factory.pattern is not None else list(factory.topics)
        return NodeDescription(name, "Source", f"topics: {factory.subscription()}", children, [],
                               topics=topics)
    if isinstance(factory, SinkNodeFactory):
        target = (
            f"topic: {factory.topic}"
            if factory.topic is not None
            else f"extractor class: {_callable_name(factory.topic_extractor)}"
        )
        return NodeDescription(name, "Sink", target, [], list(factory.predecessors),
                               topics=[] if factory.topic is None else [factory.topic])
    assert isinstance(factory, ProcessorNodeFactory)
    return NodeDescription(
        name, "Processor", f"stores: [{', '.join(factory.stores)}]", children, list(factory.predecessors),
        stores=list(factory.stores),
    )


def _fill_sizes(nodes: dict[str, NodeDescription]) -> None:
    def size(name: str, seen: set[str]) -> int:
        seen.add(name)
        for child in nodes[name].successors:
            if child not in seen:
                size(child, seen)
        return len(seen)

    for node in nodes.values():
        node.size = size(node.name, set())


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", type(fn).__qualname__)
