"""A TopologyDescription as a picture: Mermaid or Graphviz DOT text (``describe().to_mermaid()``,
``.to_dot()``, ``strom streams describe --format``).

Sub-topologies are clusters of their nodes; topics are nodes of their own outside every cluster, so a
repartition topic joins the sub-topology writing it to the one reading it; a store is a node inside its
sub-topology, linked (undirected, dashed) to each processor using it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from strom.streams.processor.topology import TopologyDescription

__all__ = ["TopologyGraph", "graph", "to_dot", "to_mermaid"]


@dataclass(frozen=True)
class TopologyGraph:
    """The picture's parts: ``clusters`` (title, processor node names, store names), the topics, the
    data ``edges`` (node or topic to node or topic) and the ``store_links`` (processor, store)."""

    clusters: list[tuple[str, list[str], list[str]]]
    topics: list[str]
    edges: list[tuple[str, str]]
    store_links: list[tuple[str, str]]
    kinds: dict[str, str]
    """Node name -> Source, Processor or Sink."""


def graph(description: TopologyDescription) -> TopologyGraph:
    clusters, topics, edges, links, kinds = [], [], [], [], {}
    for sub in description.subtopologies:
        title = f"Sub-topology {sub.id}" + (" (global store)" if sub.global_store else "")
        stores: list[str] = []
        for node in sub.nodes:
            kinds[node.name] = node.kind
            for topic in node.topics:
                if topic not in topics:
                    topics.append(topic)
                edges.append((topic, node.name) if node.kind == "Source" else (node.name, topic))
            edges.extend((node.name, successor) for successor in node.successors)
            for store in node.stores:
                links.append((node.name, store))
                if store not in stores:
                    stores.append(store)
        clusters.append((title, [node.name for node in sub.nodes], stores))
    return TopologyGraph(clusters, topics, edges, links, kinds)


_MERMAID_SHAPES = {"Source": ('(["', '"])'), "Processor": ('["', '"]'), "Sink": ('(["', '"])')}


def to_mermaid(description: TopologyDescription) -> str:
    parts = graph(description)
    ids = _Ids()
    lines = ["flowchart TB"]
    for topic in parts.topics:
        lines.append(f'    {ids.of("topic", topic)}[/"{_mermaid_text(topic)}"/]')
    for index, (title, nodes, stores) in enumerate(parts.clusters):
        lines.append(f'    subgraph sub{index}["{_mermaid_text(title)}"]')
        for name in nodes:
            opening, closing = _MERMAID_SHAPES[parts.kinds[name]]
            lines.append(f"        {ids.of('node', name)}{opening}{_mermaid_text(name)}{closing}")
        for store in stores:
            lines.append(f'        {ids.of("store", store)}[("{_mermaid_text(store)}")]')
        lines.append("    end")
    for source, target in parts.edges:
        lines.append(f"    {_endpoint(ids, parts, source)} --> {_endpoint(ids, parts, target)}")
    for processor, store in parts.store_links:
        lines.append(f"    {ids.of('node', processor)} -.- {ids.of('store', store)}")
    return "\n".join(lines) + "\n"


_DOT_SHAPES = {"Source": "ellipse", "Processor": "box", "Sink": "ellipse"}


def to_dot(description: TopologyDescription) -> str:
    parts = graph(description)
    lines = ["digraph topology {", "    rankdir=TB;", '    node [fontname="Helvetica", fontsize=10];']
    for topic in parts.topics:
        lines.append(f"    {_dot_id('topic', topic)} [label={_dot_text(topic)}, shape=parallelogram];")
    for index, (title, nodes, stores) in enumerate(parts.clusters):
        lines.append(f"    subgraph cluster_{index} {{")
        lines.append(f"        label={_dot_text(title)};")
        for name in nodes:
            lines.append(f"        {_dot_id('node', name)} [label={_dot_text(name)}, "
                         f"shape={_DOT_SHAPES[parts.kinds[name]]}];")
        for store in stores:
            lines.append(f"        {_dot_id('store', store)} [label={_dot_text(store)}, shape=cylinder];")
        lines.append("    }")
    for source, target in parts.edges:
        lines.append(f"    {_dot_endpoint(parts, source)} -> {_dot_endpoint(parts, target)};")
    for processor, store in parts.store_links:
        lines.append(f"    {_dot_id('node', processor)} -> {_dot_id('store', store)} "
                     "[dir=none, style=dashed];")
    lines.append("}")
    return "\n".join(lines) + "\n"


class _Ids:
    """Mermaid ids (``node0``, ``topic1``, ``store2``): names hold characters Mermaid ids cannot."""

    def __init__(self) -> None:
        self._ids: dict[tuple[str, str], str] = {}

    def of(self, kind: str, name: str) -> str:
        return self._ids.setdefault((kind, name), f"{kind}{sum(k == kind for k, _ in self._ids)}")


def _endpoint(ids: _Ids, parts: TopologyGraph, name: str) -> str:
    return ids.of("node", name) if name in parts.kinds else ids.of("topic", name)


def _dot_endpoint(parts: TopologyGraph, name: str) -> str:
    return _dot_id("node", name) if name in parts.kinds else _dot_id("topic", name)


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


def _dot_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot_id(kind: str, name: str) -> str:
    """Quoted ids with the kind in front: a topic, a store and a node may share a name."""
    return _dot_text(f"{kind}:{name}")
