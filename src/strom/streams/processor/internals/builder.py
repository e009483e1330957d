"""InternalTopologyBuilder: the node graph, its stores and topics, split into sub-topologies.

Names of internal topics (repartition, changelog) are kept without the application id and decorated
as ``<application.id>-<name>`` once the application id is known, as Kafka Streams does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.errors import CoPartitioningError, TopologyError
from strom.streams.processor.api import AutoOffsetReset, Processor, ProcessorSupplier

TopicExtractor = Callable[[Any, Any, Any], str]


@dataclass
class NodeFactory:
    name: str
    predecessors: list[str]


@dataclass
class SourceNodeFactory(NodeFactory):
    """``topics`` of a pattern source are the topics its ``pattern`` matched (update_subscribed_topics)."""

    topics: list[str]
    key_serde: Any = None
    value_serde: Any = None
    timestamp_extractor: Any = None
    pattern: re.Pattern[str] | None = None
    offset_reset: AutoOffsetReset | None = None

    def matches(self, topic: str) -> bool:
        """True when this is a pattern source whose pattern fully matches ``topic`` (Java's matches())."""
        return self.pattern is not None and self.pattern.fullmatch(topic) is not None

    def subscription(self) -> str:
        """What it reads, as Kafka Streams describes it: ``[a, b]`` or the pattern itself."""
        return self.pattern.pattern if self.pattern is not None else f"[{', '.join(self.topics)}]"


@dataclass
class ProcessorNodeFactory(NodeFactory):
    supplier: ProcessorSupplier
    stores: list[str] = field(default_factory=list)


@dataclass
class SinkNodeFactory(NodeFactory):
    topic: str | None
    topic_extractor: TopicExtractor | None = None
    key_serde: Any = None
    value_serde: Any = None
    partitioner: Callable[[str, Any, Any, int], int | None] | None = None


@dataclass
class InternalTopic:
    """A topic the application owns; ``partitions`` None means 'as many as the writing sub-topology'."""

    name: str
    partitions: int | None = None
    compacted: bool = False


@dataclass
class SubtopologyPlan:
    """The nodes, source topics, sink topics and stores of one sub-topology (in insertion order)."""

    id: int
    nodes: list[str]
    source_topics: list[str]
    sink_topics: list[str]
    stores: list[str]


def pattern_member(source_name: str) -> str:
    """How pattern source ``source_name`` stands in a co-partition group before its topics are known;
    never a topic name (topic names have no ':')."""
    return f"pattern:{source_name}"


class InternalTopologyBuilder:
    """Collects nodes and stores; validates names and wiring; computes sub-topologies."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeFactory] = {}
        self.store_builders: dict[str, Any] = {}
        self.store_users: dict[str, list[str]] = {}
        self.internal_topics: dict[str, InternalTopic] = {}
        self.copartition_groups: list[set[str]] = []
        self.global_stores: dict[str, Any] = {}
        """Global tables: store name -> GlobalStoreSpec (strom.streams.processor.internals.global_state)."""
        self.source_changelogs: dict[str, str] = {}
        """Store name -> the source topic that is its changelog (a source KTable's store under
        ``topology.optimization``, a read-only state store): restored from that topic up to the
        task's committed offset, never logged."""
        self.application_id: str | None = None
        self._topic_to_source: dict[str, str] = {}
        self._pattern_sources: dict[str, SourceNodeFactory] = {}
        """Pattern sources by the name that stands for their topics in co-partition groups."""
        self._plans: list[SubtopologyPlan] | None = None

    # ---- building -------------------------------------------------------------------------------
    def add_source(
        self,
        name: str,
        topics: Iterable[str] | re.Pattern[str],
        key_serde: Any = None,
        value_serde: Any = None,
        timestamp_extractor: Any = None,
        offset_reset: AutoOffsetReset | None = None,
    ) -> None:
        """A source reading ``topics``, or every topic ``topics`` (a compiled pattern) fully matches;
        ``offset_reset`` where it starts without a committed offset (None: ``auto.offset.reset``)."""
        if offset_reset is not None and not isinstance(offset_reset, AutoOffsetReset):
            raise TopologyError(f"Source {name!r}: offset_reset must be AutoOffsetReset.EARLIEST or "
                                f"AutoOffsetReset.LATEST, got {offset_reset!r}.")
        if isinstance(topics, re.Pattern):
            self._check_new_name(name)
            self._check_pattern_is_new(topics)
            source = SourceNodeFactory(name, [], [], key_serde, value_serde, timestamp_extractor, topics,
                                       offset_reset)
            self._pattern_sources[pattern_member(name)] = source
            self._add(source)
            return
        topics = list(topics)
        if not topics:
            raise TopologyError(f"Source {name!r} needs at least one topic.")
        self._check_new_name(name)
        for topic in topics:
            if topic in self._topic_to_source:
                raise TopologyError(
                    f"Topic {topic!r} is already read by source {self._topic_to_source[topic]!r}; a topic "
                    "can be a source only once in a topology. Reuse the existing stream (or merge) instead."
                )
            if topic not in self.internal_topics and (source := self._pattern_source_for(topic)):
                raise TopologyError(
                    f"Topic {topic!r} matches the pattern {source.subscription()!r} of source "
                    f"{source.name!r}; a topic can be a source only once in a topology."
                )
        for topic in topics:
            self._topic_to_source[topic] = name
        self._add(SourceNodeFactory(name, [], topics, key_serde, value_serde, timestamp_extractor,
                                    offset_reset=offset_reset))

    def offset_reset(self, topic: str) -> AutoOffsetReset | None:
        """The reset policy of the source reading ``topic`` (named or matched by a pattern), if any."""
        name = self._topic_to_source.get(topic)
        if name is not None:
            source = self.nodes[name]
            return source.offset_reset if isinstance(source, SourceNodeFactory) else None
        pattern_source = self._pattern_source_for(topic)
        return None if pattern_source is None else pattern_source.offset_reset

    def _check_pattern_is_new(self, pattern: re.Pattern[str]) -> None:
        for topic, source in self._topic_to_source.items():
            if topic not in self.internal_topics and pattern.fullmatch(topic):
                raise TopologyError(
                    f"Pattern {pattern.pattern!r} matches topic {topic!r}, already read by source "
                    f"{source!r}; a topic can be a source only once in a topology."
                )

    def pattern_sources(self) -> list[SourceNodeFactory]:
        """The sources that read every topic a pattern matches."""
        return list(self._pattern_sources.values())

    def stands_for_several_topics(self, member: str) -> bool:
        """True for a pattern source's ``pattern_member``: it may match any number of topics."""
        return member in self._pattern_sources

    def _pattern_source_for(self, topic: str) -> SourceNodeFactory | None:
        matching = [n for n in self.pattern_sources() if n.matches(topic)]
        if len(matching) > 1:
            raise TopologyError(
                f"Topic {topic!r} matches the patterns of sources {[n.name for n in matching]}; a topic "
                "can be a source only once in a topology. Make the patterns disjoint."
            )
        return matching[0] if matching else None

    def subscribe_pattern_topic(self, topic: str) -> str | None:
        """Adds ``topic`` to the pattern source matching it and returns that source's name (None when
        no pattern matches, or the topic belongs to the application or the broker)."""
        if not self._pattern_sources or topic in self._topic_to_source or self._application_owns(topic):
            return None
        source = self._pattern_source_for(topic)
        if source is None:
            return None
        if topic not in source.topics:
            source.topics.append(topic)
            self._plans = None
        return source.name

    def update_subscribed_topics(self, topics: Iterable[str]) -> None:
        """Kafka's subscription update: each pattern source reads exactly the given (real) topics its
        pattern matches, in name order."""
        for source in self.pattern_sources():
            source.topics = []
        for topic in sorted(topics):
            self.subscribe_pattern_topic(topic)
        self._plans = None

    def _application_owns(self, topic: str) -> bool:
        """Broker-internal topics (``__consumer_offsets``) and this application's repartition and
        changelog topics are never matched by patterns."""
        own = self.application_id is not None and topic.startswith(f"{self.application_id}-")
        return topic.startswith("__") or (own and topic.endswith(("-repartition", "-changelog")))

    def add_processor(self, name: str, supplier: ProcessorSupplier, *parents: str) -> None:
        """``supplier`` makes a new processor for every task: a Processor class or a function."""
        if isinstance(supplier, Processor) or not callable(supplier):
            raise TopologyError(
                f"Processor {name!r} needs a supplier that makes a new processor per task (the Processor "
                f"class, or a function returning a new instance), got {supplier!r}."
            )
        self._check_new_name(name)
        self._check_parents(name, parents)
        self._add(ProcessorNodeFactory(name, list(parents), supplier))

    def add_sink(
        self,
        name: str,
        topic: str | TopicExtractor,
        *parents: str,
        key_serde: Any = None,
        value_serde: Any = None,
        partitioner: Any = None,
    ) -> None:
        self._check_new_name(name)
        self._check_parents(name, parents)
        if callable(topic):
            self._add(SinkNodeFactory(name, list(parents), None, topic, key_serde, value_serde, partitioner))
        else:
            self._add(SinkNodeFactory(name, list(parents), topic, None, key_serde, value_serde, partitioner))

    def add_state_store(
        self, store_builder: Any, *processor_names: str, allow_override: bool = False
    ) -> None:
        name = store_builder.name
        if (
            name in self.store_builders
            and not allow_override
            and self.store_builders[name] is not store_builder
        ):
            raise TopologyError(f"A state store named {name!r} already exists; store names must be unique.")
        self.store_builders[name] = store_builder
        self.store_users.setdefault(name, [])
        if processor_names:
            self.connect_processor_and_state_stores(processor_names[0], name)
            for other in processor_names[1:]:
                self.connect_processor_and_state_stores(other, name)

    def add_global_store(self, spec: Any) -> None:
        """Registers a GlobalStoreSpec (a GlobalKTable's, or a store a processor fills from its topic)."""
        if spec.state_update_supplier is not None:
            if getattr(spec.store_builder, "logging_enabled", False):
                raise TopologyError(f"Global store {spec.name!r} must have logging disabled (its topic is "
                                    "its changelog): build it with .with_logging_disabled().")
            supplier = spec.state_update_supplier
            if isinstance(supplier, Processor) or not callable(supplier):
                raise TopologyError("add_global_store needs a supplier that makes a new processor (the "
                                    f"Processor class, or a function returning one), got {supplier!r}.")
        if any(other.topic == spec.topic for other in self.global_stores.values()):
            raise TopologyError(f"Topic {spec.topic!r} is already read by a global store; one global store "
                                "per topic (reuse that GlobalKTable or store).")
        if spec.name in self.global_stores or spec.name in self.store_builders:
            raise TopologyError(f"A store named {spec.name!r} exists already; give the global store another "
                                "name.")
        taken = [n for n in (spec.source_name, spec.processor_name) if n in self.nodes]
        if taken:
            raise TopologyError(f"The topology has a node named {taken[0]!r} already; name the global "
                                "store's source and processor differently.")
        self.global_stores[spec.name] = spec

    def connect_source_store_and_topic(self, store_name: str, topic: str) -> None:
        """Kafka's ``connectSourceStoreAndTopic``: ``topic`` (read by a source of this topology) is the
        changelog of store ``store_name``, whose own logging is then disabled."""
        if store_name in self.source_changelogs:
            raise TopologyError(f"Store {store_name!r} already uses topic "
                                f"{self.source_changelogs[store_name]!r} as its changelog.")
        store_builder = self.store_builders.get(store_name)
        if store_builder is None:
            raise TopologyError(f"No state store named {store_name!r}; add it with add_state_store first.")
        store_builder.with_logging_disabled()
        self.source_changelogs[store_name] = topic

    def connect_processor_and_state_stores(self, processor_name: str, *store_names: str) -> None:
        node = self.nodes.get(processor_name)
        if not isinstance(node, ProcessorNodeFactory):
            raise TopologyError(
                f"No processor named {processor_name!r}; add it before connecting stores to it."
            )
        for store in store_names:
            if store not in self.store_builders:
                raise TopologyError(f"No state store named {store!r}; add it with add_state_store first.")
            if store not in node.stores:
                node.stores.append(store)
                self.store_users[store].append(processor_name)
        self._plans = None

    def add_internal_topic(self, name: str, partitions: int | None = None) -> None:
        self.internal_topics[name] = InternalTopic(name, partitions)

    def remove_repartition(self, topic: str, node_names: Iterable[str], replacement: str) -> None:
        """Drops repartition topic ``topic`` and its nodes (their edges are rewired already); co-partition
        groups name ``replacement`` instead (topology.optimization merging repartition topics)."""
        for name in node_names:
            del self.nodes[name]
        del self.internal_topics[topic]
        self._topic_to_source.pop(topic, None)
        for group in self.copartition_groups:
            if topic in group:
                group.discard(topic)
                group.add(replacement)
        self._plans = None

    def move_after(self, anchor: str, node_names: Iterable[str]) -> None:
        """Puts ``node_names`` right after node ``anchor`` in insertion order (which orders children and
        numbers sub-topologies), as if they had been added then."""
        moved = [self.nodes.pop(name) for name in node_names]
        reordered: dict[str, NodeFactory] = {}
        for name, node in self.nodes.items():
            reordered[name] = node
            if name == anchor:
                reordered.update((m.name, m) for m in moved)
        self.nodes = reordered
        self._plans = None

    def copartition(self, topics: Iterable[str]) -> None:
        """Declares that these source topics must have the same partition count (joins, co-grouping).
        A ``pattern_member`` stands for every topic its pattern source matched."""
        self.copartition_groups.append(set(topics))

    def _add(self, node: NodeFactory) -> None:
        self.nodes[node.name] = node
        self._plans = None

    def _check_new_name(self, name: str) -> None:
        if not name:
            raise TopologyError("Node names must not be empty.")
        if name in self.nodes:
            raise TopologyError(
                f"A node named {name!r} already exists; node names must be unique "
                "(pass a different name, e.g. Named.as_(...))."
            )

    def _check_parents(self, name: str, parents: Iterable[str]) -> None:
        parents = list(parents)
        if not parents:
            raise TopologyError(f"Node {name!r} needs at least one parent.")
        for parent in parents:
            if parent == name:
                raise TopologyError(f"Node {name!r} cannot be its own parent.")
            if parent not in self.nodes:
                raise TopologyError(f"Parent {parent!r} of node {name!r} does not exist; add it first.")
            if isinstance(self.nodes[parent], SinkNodeFactory):
                raise TopologyError(f"Sink {parent!r} cannot have children (node {name!r}).")

    # ---- querying -------------------------------------------------------------------------------
    def children(self, name: str) -> list[str]:
        return [n.name for n in self.nodes.values() if name in n.predecessors]

    def decorate(self, topic: str) -> str:
        """The real topic name: internal topics get the ``<application.id>-`` prefix."""
        if topic in self.internal_topics and self.application_id is not None:
            return f"{self.application_id}-{topic}"
        return topic

    def changelog_topic(self, store: str) -> str:
        if self.application_id is None:
            raise TopologyError("The application id is not set yet; set 'application.id' in the config.")
        return f"{self.application_id}-{store}-changelog"

    def subtopologies(self) -> list[SubtopologyPlan]:
        """Sub-topologies: nodes connected by edges or by a shared store, numbered in source order."""
        if self._plans is None:
            self._plans = self._make_plans()
        return self._plans

    def _make_plans(self) -> list[SubtopologyPlan]:
        self._validate()
        parent = {name: name for name in self.nodes}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: str, b: str) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[rb] = ra

        for node in self.nodes.values():
            for pred in node.predecessors:
                union(pred, node.name)
        for users in self.store_users.values():
            for user in users[1:]:
                union(users[0], user)
        groups: dict[str, list[str]] = {}
        for name in self.nodes:  # insertion order: the group of the earliest node comes first
            groups.setdefault(find(name), []).append(name)
        plans = []
        for idx, members in enumerate(groups.values()):
            sources = [
                t for m in members if isinstance(n := self.nodes[m], SourceNodeFactory) for t in n.topics
            ]
            sinks = [n.topic for m in members if isinstance(n := self.nodes[m], SinkNodeFactory) and n.topic]
            stores = list(
                dict.fromkeys(
                    s
                    for m in members
                    if isinstance(n := self.nodes[m], ProcessorNodeFactory)
                    for s in n.stores
                )
            )
            plans.append(SubtopologyPlan(idx, members, sources, sinks, stores))
        return plans

    def _validate(self) -> None:
        for name, users in self.store_users.items():
            if not users:
                raise TopologyError(
                    f"State store {name!r} is not connected to any processor; connect it with "
                    "connect_processor_and_state_stores or drop it."
                )
        for node in self.nodes.values():
            if isinstance(node, SourceNodeFactory):
                continue
            if not self._reaches_source(node.name, set()):
                raise TopologyError(f"Node {node.name!r} is not connected to any source.")

    def _reaches_source(self, name: str, seen: set[str]) -> bool:
        node = self.nodes[name]
        if isinstance(node, SourceNodeFactory):
            return True
        seen.add(name)
        return any(p not in seen and self._reaches_source(p, seen) for p in node.predecessors)

    # ---- partitions -----------------------------------------------------------------------------
    def topic_partitions(self, external: Mapping[str, int]) -> dict[str, int]:
        """Partition counts of every source topic (undecorated names), internal ones computed as Kafka
        Streams does: a repartition topic gets the largest partition count among the source topics of
        the sub-topology writing to it, unless set explicitly; co-partitioned groups must agree."""
        if self.pattern_sources():
            self.update_subscribed_topics(external)
        for source in self.pattern_sources():
            if not source.topics:
                raise TopologyError(
                    f"Source {source.name!r} reads the topics matching {source.subscription()!r}, but no "
                    "topic matches it; create a matching topic before starting the application."
                )
        counts: dict[str, int] = {}
        for plan in self.subtopologies():
            for topic in plan.source_topics:
                if topic not in self.internal_topics:
                    real = self.decorate(topic)
                    if real not in external:
                        raise TopologyError(
                            f"The partition count of source topic {topic!r} is unknown; "
                            "create the topic before starting the application."
                        )
                    counts[topic] = external[real]
        for topic in self.internal_topics.values():
            if topic.partitions is not None:
                counts[topic.name] = topic.partitions
        self._count_internal_sources(counts)
        missing = [t for p in self.subtopologies() for t in p.source_topics if t not in counts]
        if missing:
            raise TopologyError(
                f"Cannot work out the partition count of internal topics {missing}; set it "
                "with Repartitioned.with_number_of_partitions(...)."
            )
        self._enforce_copartitioning(counts)
        return counts

    def _count_internal_sources(self, counts: dict[str, int]) -> None:
        """Gives each internal source topic the largest known partition count among the source topics
        of the sub-topologies writing to it, round after round, as Kafka Streams' RepartitionTopics does:
        a writer may also read an internal topic not counted yet (a foreign-key join's two
        sub-topologies each read the topic the other writes), so the known counts suffice."""
        plans = self.subtopologies()
        unknown = {t for p in plans for t in p.source_topics if t in self.internal_topics and t not in counts}
        while unknown:
            found = {}
            for topic in unknown:
                candidates = [counts[t] for p in plans if topic in p.sink_topics
                              for t in p.source_topics if t in counts]
                if candidates:
                    found[topic] = max(candidates)
            if not found:
                return
            counts.update(found)
            unknown -= found.keys()

    def _enforce_copartitioning(self, counts: dict[str, int]) -> None:
        for members in self.copartition_groups:
            group = {t for m in members for t in self._resolve_member(m)}
            external = {t: counts[t] for t in group if t not in self.internal_topics}
            if len(set(external.values())) > 1:
                raise CoPartitioningError(
                    f"Topics {sorted(external)} must be co-partitioned but have partition counts "
                    f"{external}. Give them the same number of partitions (or repartition one side with "
                    "KStream.repartition(Repartitioned.with_number_of_partitions(n)))."
                )
            internal = [t for t in group if t in self.internal_topics]
            target = next(iter(external.values())) if external else max(counts[t] for t in group)
            for topic in internal:
                explicit = self.internal_topics[topic].partitions
                if explicit is not None and explicit != target:
                    raise CoPartitioningError(
                        f"Repartition topic {topic!r} is set to {explicit} partitions but must be "
                        f"co-partitioned with {sorted(group)} ({target} partitions); drop the explicit count."
                    )
                counts[topic] = target

    def _resolve_member(self, member: str) -> list[str]:
        source = self._pattern_sources.get(member)
        return [member] if source is None else source.topics

    def task_ids(self, external: Mapping[str, int]) -> list[tuple[int, int]]:
        """(sub-topology, partition) of every task: as many tasks as the largest source partition count."""
        counts = self.topic_partitions(external)
        return [
            (p.id, part)
            for p in self.subtopologies()
            for part in range(max(counts[t] for t in p.source_topics))
        ]
