"""``topology.optimization``: rewrites of the DSL's topology in ``StreamsBuilder.build(props)``, the rules
of Kafka Streams' InternalStreamsBuilder.optimizeTopology.

- ``reuse.ktable.source.topics``: the store of a source KTable uses its source topic as its changelog
  (no ``-changelog`` topic is written); a task restores it from that topic up to its committed offset.
- ``merge.repartition.topics``: the repartition topics that groupings and joins put after the same
  key-changing operation become one, written right after that operation; what stood between the two
  (filters, peeks: anything that changes neither key nor value) moves behind the single topic.
- ``single.store.self.join`` is accepted and has no effect (a self-join keeps its two window stores).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from strom.streams import config as cfg
from strom.streams.kstream.internals.stateless import PassThrough
from strom.streams.kstream.internals.streams_builder import InternalStreamsBuilder, RepartitionNodes
from strom.streams.processor.internals.builder import (
    InternalTopologyBuilder,
    SinkNodeFactory,
    SourceNodeFactory,
)

__all__ = ["keep_null_keys_for_joins", "optimize"]

log = logging.getLogger(__name__)


def optimize(builder: InternalStreamsBuilder, rules: Collection[str]) -> None:
    """Applies the optimization ``rules`` (names of ``topology.optimization``) to ``builder``'s topology."""
    if cfg.REUSE_KTABLE_SOURCE_TOPICS in rules:
        reuse_source_topics(builder)
    if cfg.MERGE_REPARTITION_TOPICS in rules:
        merge_repartition_topics(builder)


def reuse_source_topics(builder: InternalStreamsBuilder) -> None:
    """Every materialized source KTable's store takes its source topic as its changelog."""
    internal = builder.internal
    for node, topic in builder.table_sources.items():
        for store in internal.nodes[node].stores:  # type: ignore[attr-defined]
            if store not in internal.source_changelogs:
                log.debug("Store %s uses source topic %s as its changelog", store, topic)
                internal.connect_source_store_and_topic(store, topic)


def merge_repartition_topics(builder: InternalStreamsBuilder) -> None:
    """One repartition topic per key-changing operation, as Kafka's ``mergeRepartitionTopics``."""
    groups: dict[str, list[RepartitionNodes]] = {}
    for repartition in builder.optimizable_repartitions:
        changer = _key_changing_parent(builder, repartition)
        if changer is not None:
            groups.setdefault(changer, []).append(repartition)
    for changer, repartitions in groups.items():
        _merge(builder.internal, changer, repartitions)
    builder.optimizable_repartitions = [r for r in builder.optimizable_repartitions
                                        if r.filter in builder.internal.nodes]


def _key_changing_parent(builder: InternalStreamsBuilder, repartition: RepartitionNodes) -> str | None:
    """The key-changing node the repartition's records come from, if only nodes that change neither key
    nor value (and never merge streams) stand between them, as Kafka's ``getKeyChangingParentNode``."""
    nodes = builder.internal.nodes
    name = nodes[repartition.filter].predecessors[0]
    while name not in builder.key_changing:
        node = nodes[name]
        merges_or_starts = isinstance(node, SourceNodeFactory) or len(node.predecessors) != 1
        if name in builder.value_changing or merges_or_starts:
            return None
        name = node.predecessors[0]
    return name


def _merge(internal: InternalTopologyBuilder, changer: str, repartitions: list[RepartitionNodes]) -> None:
    """The first repartition topic, now right after ``changer``, replaces them all."""
    kept = repartitions[0]
    nodes = internal.nodes
    kept_sink = nodes[kept.sink]
    kept_source = nodes[kept.source]
    assert isinstance(kept_source, SourceNodeFactory)
    # where each one stands, found before any edge changes
    places = [(r, parent, _child_of(internal, parent, changer), internal.children(r.source))
              for r in repartitions for parent in [nodes[r.filter].predecessors[0]]]
    for repartition, parent, moved, children in places:
        # the node right below the key change on the way to this repartition moves behind the kept topic
        for child in children:
            _replace_parent(nodes[child].predecessors, repartition.source,
                            kept.source if moved is None else parent)
        if moved is not None and changer in nodes[moved].predecessors:
            _replace_parent(nodes[moved].predecessors, changer, kept.source)
        for which in ("key_serde", "value_serde"):
            if getattr(kept_sink, which) is None:
                serde = getattr(nodes[repartition.sink], which)
                setattr(kept_sink, which, serde)
                setattr(kept_source, which, serde)
        if repartition is not kept:
            internal.remove_repartition(repartition.topic, (repartition.filter, repartition.sink,
                                                            repartition.source), kept.topic)
    nodes[kept.filter].predecessors = [changer]
    internal.move_after(changer, (kept.filter, kept.sink, kept.source))
    log.debug("Repartition topics %s merged into %s after %s", [r.topic for r in repartitions], kept.topic,
              changer)


def _child_of(internal: InternalTopologyBuilder, start: str, changer: str) -> str | None:
    """The node on the single-parent path from ``changer`` down to ``start`` whose parent is ``changer``
    (None when ``start`` is ``changer`` itself)."""
    name = start
    while name != changer:
        parent = internal.nodes[name].predecessors[0]
        if parent == changer:
            return name
        name = parent
    return None


def _replace_parent(predecessors: list[str], old: str, new: str) -> None:
    predecessors[predecessors.index(old)] = new


def keep_null_keys_for_joins(builder: InternalStreamsBuilder) -> None:
    """A repartition topic keeps records with a null key when a left or outer join that joins them with
    None (KIP-962) reads it, directly or after further operators and repartitions, as Kafka Streams'
    rewriteRepartitionNodes decides (for every topology, whatever topology.optimization says); other
    repartition topics drop them."""
    internal = builder.internal
    children: dict[str, list[str]] = {}
    readers: dict[str, list[str]] = {}
    for node in internal.nodes.values():
        for parent in node.predecessors:
            children.setdefault(parent, []).append(node.name)
        if isinstance(node, SourceNodeFactory):
            for topic in set(node.topics) & internal.internal_topics.keys():
                readers.setdefault(topic, []).append(node.name)

    def downstream(name: str) -> list[str]:
        node = internal.nodes[name]
        topic = getattr(node, "topic", None) if isinstance(node, SinkNodeFactory) else None
        return children.get(name, []) + (readers.get(topic, []) if topic is not None else [])

    for name in builder.repartition_filters:
        if name not in internal.nodes:
            continue  # merged away by merge.repartition.topics
        seen, pending = {name}, [name]
        while pending:
            for child in downstream(pending.pop()):
                if child not in seen:
                    seen.add(child)
                    pending.append(child)
        if seen & builder.null_key_joins:
            internal.nodes[name].supplier = PassThrough
