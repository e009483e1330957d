"""Specs whose result does not depend on how records are spread over partitions, for the oracle's
partitioned run (tests/spark/runtime/test_oracle_partitions.py).

Kafka Streams' TopologyTestDriver has one partition per topic; strom on Spark runs the same spec over
several, where records of one key stay in order but keys of different partitions interleave as the tasks
happen to run. The results compared there are those every interleaving agrees on: a stream's output as a
multiset, a table's final value per key and its store's final contents. So these strategies draw what
keeps that true: stateless stream operators; tables from sources, from ``to_table`` of a stream that kept
its source's keys, from commutative aggregations (count, sum, max), table-table and foreign-key joins and
table re-grouping; no windows, suppression or stream-table joins (their results depend on stream time or
on which side arrives first).

With caching, one more thing depends on timing: how many updates a cache folds into one before it flushes
(at every record in the test driver, at every commit on Spark). A table join computes its old value from
the other side as it is now, so when a cached side flushes late the join's old value is not the one it
sent; an aggregation of the join's result re-grouped then subtracts what it never added. Kafka Streams
does the same: on a cluster its final aggregate depends on the commit interval. Such specs are drawn only
without caching.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from oracle.strategies import KEY_SELECTORS, MAPPERS, PREDICATES, _input, _props, _Spec


def _stream(draw: st.DrawFn, spec: _Spec, depth: int) -> tuple[str, bool]:
    """A stream expression and whether it kept its single source's keys (and their order)."""
    if depth <= 0:
        return spec.source("stream", draw(st.sampled_from(["s1", "s2"]))), True
    choice = draw(st.sampled_from(["source", "filter", "map_values", "flat_map_values", "split",
                                   "repartition", "select_key", "map", "merge"]))
    if choice == "source":
        return _stream(draw, spec, 0)
    src, kept = _stream(draw, spec, depth - 1)
    if choice in ("filter", "split"):
        fn = draw(st.sampled_from(PREDICATES))
        if choice == "split":
            return spec.add("split", **{"in": src}, fn=fn, name=f"split{len(spec.nodes)}-",
                            branch=draw(st.sampled_from([0, 1]))), kept
        return spec.add("filter", **{"in": src}, fn=fn), kept
    if choice == "map_values":
        return spec.add(choice, **{"in": src}, fn=draw(st.sampled_from(MAPPERS))), kept
    if choice == "flat_map_values":
        return spec.add(choice, **{"in": src}, fn=draw(st.sampled_from(["dup", "none"]))), kept
    if choice == "repartition":
        return spec.add(choice, **{"in": src}), kept
    if choice == "select_key":
        return spec.add(choice, **{"in": src}, fn=draw(st.sampled_from(KEY_SELECTORS))), False
    if choice == "map":
        return spec.add(choice, **{"in": src}, fn=draw(st.sampled_from(KEY_SELECTORS)),
                        value_fn=draw(st.sampled_from(MAPPERS))), False
    other, _ = _stream(draw, spec, depth - 1)
    return spec.add("merge", **{"in": src}, other=other), False


def _table(draw: st.DrawFn, spec: _Spec, depth: int) -> str:
    if depth <= 0:
        topic = draw(st.sampled_from(["t1", "t2"]))
        if topic not in spec.sources:
            spec.sources[topic] = spec.add("table", topic=topic, **spec.store(draw, "kv"))
        return spec.sources[topic]
    choice = draw(st.sampled_from(["source", "to_table", "aggregate", "filter", "map_values", "table_join",
                                   "fk_join", "table_group_by"]))
    if choice == "source":
        return _table(draw, spec, 0)
    if choice == "to_table":
        stream, kept = _stream(draw, spec, depth - 1)
        if not kept:  # its latest value per key would depend on how the keys' partitions interleave
            stream = spec.add("repartition", **{"in": spec.source("stream", "s1")})
        return spec.add("to_table", **{"in": stream}, **spec.store(draw, "kv"))
    if choice == "aggregate":
        stream, _ = _stream(draw, spec, depth - 1)
        grouped = (spec.add("group_by_key", **{"in": stream}) if draw(st.booleans())
                   else spec.add("group_by", **{"in": stream}, fn=draw(st.sampled_from(KEY_SELECTORS))))
        op = draw(st.sampled_from(["count", "reduce", "aggregate"]))
        params: dict[str, Any] = {"in": grouped, **spec.store(draw, "kv")}
        if op != "count":
            params["fn"] = draw(st.sampled_from(["sum", "max"]))
        return spec.add(op, **params)
    if choice in ("filter", "map_values"):
        src = _table(draw, spec, depth - 1)
        fn = draw(st.sampled_from(PREDICATES if choice == "filter" else MAPPERS))
        return spec.add(choice, **{"in": src}, fn=fn, **spec.store(draw, "kv"))
    if choice in ("table_join", "fk_join"):
        left = _table(draw, spec, depth - 1)
        right = left if draw(st.integers(0, 4)) == 0 else _table(draw, spec, depth - 1)
        kinds = ["inner", "left", "outer"] if choice == "table_join" else ["inner", "left"]
        return spec.add("join" if choice == "table_join" else "fk_join", **{"in": left}, other=right,
                        kind=draw(st.sampled_from(kinds)), fn="lr", **spec.store(draw, "kv"))
    grouped = spec.add("group_by", **{"in": _table(draw, spec, depth - 1)},
                       fn=draw(st.sampled_from(KEY_SELECTORS)))
    op = draw(st.sampled_from(["count", "reduce", "aggregate"]))
    params = {"in": grouped, **spec.store(draw, "kv")}
    if op != "count":
        params.update(fn="sum", subtractor="sub")
    return spec.add(op, **params)


def partition_free_topologies(cached: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Specs for a run with (``cached``) or without record caches."""
    return _topologies().filter(lambda spec: not cached or not _regroups_a_join(spec))


def _regroups_a_join(spec: dict[str, Any]) -> bool:
    """Whether a table re-grouping reads a table join's result (the timing dependence above)."""
    nodes = {node["id"]: node for node in spec["nodes"]}

    def joined(node_id: str) -> bool:
        node = nodes[node_id]
        return node["op"] in ("join", "fk_join") or any(
            joined(node[edge]) for edge in ("in", "other") if edge in node)

    # a stream's operators here are stateless (no join), so a group_by reading a join regroups a table
    return any(node["op"] == "group_by" and joined(node["in"]) for node in spec["nodes"])


@st.composite
def _topologies(draw: st.DrawFn) -> dict[str, Any]:
    """A spec whose sink reads a stream (compared as a multiset) or a table (compared per key)."""
    spec = _Spec()
    depth = draw(st.integers(1, 3))
    root = draw(st.sampled_from(["stream", "table", "table"]))
    node = _stream(draw, spec, depth)[0] if root == "stream" else _table(draw, spec, depth)
    return {
        "root": root,
        "props": _props(draw),
        "nodes": spec.nodes,
        "sinks": [{"in": node, "topic": "out"}],
        "stores": spec.stores,
        "input": draw(_input(sorted(spec.sources))),
    }
