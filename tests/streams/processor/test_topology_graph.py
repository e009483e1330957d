"""describe().to_mermaid() / .to_dot(): every node, topic and store of a topology with a repartition, a
stream-table join, a global store and a punctuating processor, and every edge between them."""

from __future__ import annotations

import re

from .enrichment_app import build

REPARTITION = "KSTREAM-JOIN-0000000006-left-repartition"
CLUSTERS = {
    "Sub-topology 0": {f"{REPARTITION}-source", "KSTREAM-JOIN-0000000006", "KSTREAM-JOIN-0000000007",
                       "KSTREAM-PROCESSOR-0000000008", "KSTREAM-SOURCE-0000000002", "KSTREAM-SINK-0000000009",
                       "KTABLE-SOURCE-0000000003", "customers-store", "last-seen"},
    "Sub-topology 1": {"KSTREAM-SOURCE-0000000004", "KSTREAM-KEY-SELECT-0000000005",
                       f"{REPARTITION}-filter", f"{REPARTITION}-sink"},
    "Sub-topology 2 (global store)": {"KSTREAM-SOURCE-0000000000", "KTABLE-SOURCE-0000000001",
                                      "products-store"},
}
TOPICS = {"orders", "customers", "products", "enriched-orders", REPARTITION}
EDGES = {
    ("orders", "KSTREAM-SOURCE-0000000004"),
    ("KSTREAM-SOURCE-0000000004", "KSTREAM-KEY-SELECT-0000000005"),
    ("KSTREAM-KEY-SELECT-0000000005", f"{REPARTITION}-filter"),
    (f"{REPARTITION}-filter", f"{REPARTITION}-sink"),
    (f"{REPARTITION}-sink", REPARTITION),  # the repartition topic links sub-topology 1 to 0
    (REPARTITION, f"{REPARTITION}-source"),
    (f"{REPARTITION}-source", "KSTREAM-JOIN-0000000006"),
    ("customers", "KSTREAM-SOURCE-0000000002"),
    ("KSTREAM-SOURCE-0000000002", "KTABLE-SOURCE-0000000003"),
    ("KSTREAM-JOIN-0000000006", "KSTREAM-JOIN-0000000007"),
    ("KSTREAM-JOIN-0000000007", "KSTREAM-PROCESSOR-0000000008"),
    ("KSTREAM-PROCESSOR-0000000008", "KSTREAM-SINK-0000000009"),
    ("KSTREAM-SINK-0000000009", "enriched-orders"),
    ("products", "KSTREAM-SOURCE-0000000000"),
    ("KSTREAM-SOURCE-0000000000", "KTABLE-SOURCE-0000000001"),
}
STORE_LINKS = {
    ("KSTREAM-JOIN-0000000006", "customers-store"),  # the join reads the table's store
    ("KTABLE-SOURCE-0000000003", "customers-store"),
    ("KSTREAM-PROCESSOR-0000000008", "last-seen"),  # the punctuating processor's own store
    ("KTABLE-SOURCE-0000000001", "products-store"),
}


def _mermaid(text: str) -> tuple[dict[str, set[str]], set[str], set[tuple[str, str]], set[tuple[str, str]]]:
    assert text.startswith("flowchart TB\n")
    labels = dict(re.findall(r'^\s+(\w+)\W+"(.*?)"\W*$', text, re.M))
    clusters: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if found := re.match(r'\s+subgraph (\w+)\["(.*)"\]', line):
            current = clusters.setdefault(found.group(2), set())
        elif line.strip() == "end":
            current = None
        elif current is not None:
            current.add(labels[line.split("[")[0].split("(")[0].strip()])
    topics = {labels[i] for i in labels if i.startswith("topic")}
    edges = {(labels[a], labels[b]) for a, b in re.findall(r"^\s+(\w+) --> (\w+)$", text, re.M)}
    links = {(labels[a], labels[b]) for a, b in re.findall(r"^\s+(\w+) -\.- (\w+)$", text, re.M)}
    return clusters, topics, edges, links


def test_mermaid_draws_clusters_topics_stores_and_every_edge():
    clusters, topics, edges, links = _mermaid(build()[0].describe().to_mermaid())
    assert clusters == CLUSTERS
    assert topics == TOPICS
    assert edges == EDGES
    assert links == STORE_LINKS


def test_dot_draws_the_same_graph():
    text = build()[0].describe().to_dot()
    assert text.startswith("digraph topology {") and text.rstrip().endswith("}")
    bodies = re.findall(r'subgraph cluster_\d+ \{\s+label="(.*?)";(.*?)\n    \}', text, re.S)
    clusters = {label: set(re.findall(r'^\s+"(?:node|store):(.*?)" \[label', body, re.M))
                for label, body in bodies}
    assert clusters == CLUSTERS
    assert set(re.findall(r'^\s+"topic:(.*?)" \[label=.*shape=parallelogram\];$', text, re.M)) == TOPICS
    edges = set(re.findall(r'^\s+"\w+:(.*?)" -> "\w+:(.*?)";$', text, re.M))
    assert edges == EDGES
    links = set(re.findall(r'^\s+"node:(.*?)" -> "store:(.*?)" \[dir=none, style=dashed\];$', text, re.M))
    assert links == STORE_LINKS


def test_names_with_quotes_are_escaped():
    from strom.streams import StreamsBuilder

    builder = StreamsBuilder()
    builder.stream('in"put').to("out")
    description = builder.build().describe()
    assert '[/"in#quot;put"/]' in description.to_mermaid()
    assert '"topic:in\\"put" [label="in\\"put"' in description.to_dot()
