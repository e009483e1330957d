"""Specs whose result does not depend on how records are spread over partitions, for the oracle's
partitioned run (tests/spark/runtime/test_oracle_partitions.py).

Kafka Streams' TopologyTestDriver has one partition per topic; strom on Spark runs the same spec over
several, where records of one key stay in order but keys of different partitions interleave as the tasks
happen to run. The results compared there are those every interleaving agrees on: a stream's output as a
multiset, a table's final value per key and its store's final contents. So these strategies draw what
keeps that true: stateless stream operators; tables from sources, from ``to_table`` of a stream that kept
its source's keys, from commutative aggregations (count, sum, max), table-table and foreign-key joins and
table re-grouping, windowed aggregations whose grace outlasts the input (so that no record is late
whatever a task's stream time); no suppression, emit on close or stream-table joins (their results
depend on stream time or on which side arrives first). A session aggregate's merger must agree with its
adder (sum with sum), or merging sessions in another order gives another value.

With caching, one more thing depends on timing: how many updates a cache folds into one before it flushes
(at every record in the test driver, at every commit on Spark), and a table re-grouping sees that. A key
added and deleted again between two flushes never reaches the aggregation (no count of 0 for it); a table
join computes its old value from the other side as it is now, so when a cached side flushes late the old
value is not the one it sent, and the aggregation subtracts what it never added. A table joined with
itself keeps the result of a key added and deleted one record at a time (Kafka's join finds the deleted
key's other side already gone and forwards nothing), but never has it when the cache folded the two.
Kafka Streams does the same on a cluster (there, too, these results depend on the commit interval), so
table re-groupings and self-joins are drawn only without caching.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from oracle.strategies import KEY_SELECTORS, MAPPERS, PREDICATES, _excluded, _input, _props, _Spec

GRACE = 10_000_000
"""Longer than any drawn input lasts: no record is late, whichever task's stream time it meets."""


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


def _grouped(draw: st.DrawFn, spec: _Spec, depth: int) -> str:
    stream, _ = _stream(draw, spec, depth)
    if draw(st.booleans()):
        return spec.add("group_by_key", **{"in": stream})
    return spec.add("group_by", **{"in": stream}, fn=draw(st.sampled_from(KEY_SELECTORS)))


def _windowed(draw: st.DrawFn, spec: _Spec, depth: int) -> str:
    kind = draw(st.sampled_from(["tumbling", "hopping", "sliding", "session"]))
    size = draw(st.sampled_from([10, 30, 100]))
    window: dict[str, Any] = {"type": kind, "size": size, "grace": GRACE}
    if kind == "hopping":
        window["advance"] = draw(st.sampled_from([d for d in (5, 10, 15) if d <= size]))
    grouped = _grouped(draw, spec, depth - 1)
    windowed = spec.add("windowed_by", **{"in": grouped}, window=window, emit="update")
    op = draw(st.sampled_from(["count", "reduce", "aggregate"]))
    params: dict[str, Any] = {"in": windowed, "key_serde": "String",
                              **spec.store(draw, "session" if kind == "session" else "window")}
    if op != "count":
        merged_by_sum = kind == "session" and op == "aggregate"
        params["fn"] = "sum" if merged_by_sum else draw(st.sampled_from(["sum", "max"]))
    return spec.add("windowed_to_stream", **{"in": spec.add(op, **params)})


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
        grouped = _grouped(draw, spec, depth - 1)
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
    return _topologies().filter(lambda spec: not _excluded(spec) and not (cached and _sees_cache_folds(spec)))


def _sees_cache_folds(spec: dict[str, Any]) -> bool:
    """Whether a group_by reads a table or a table is joined with itself (the timing dependence above)."""
    nodes = {node["id"]: node for node in spec["nodes"]}

    def table(node_id: str) -> bool:
        node = nodes[node_id]
        if node["op"] in ("filter", "map_values"):
            return table(node["in"])
        return node["op"] in ("table", "to_table", "count", "reduce", "aggregate", "join", "fk_join")

    return any((node["op"] == "group_by" and table(node["in"]))
               or (node["op"] in ("join", "fk_join") and node["in"] == node["other"])
               for node in spec["nodes"])


@st.composite
def _topologies(draw: st.DrawFn) -> dict[str, Any]:
    """A spec whose sink reads a stream (compared as a multiset), a table or a windowed table (compared
    per key)."""
    spec = _Spec()
    depth = draw(st.integers(1, 3))
    root = draw(st.sampled_from(["stream", "table", "table", "windowed"]))
    if root == "stream":
        node = _stream(draw, spec, depth)[0]
    else:
        node = _table(draw, spec, depth) if root == "table" else _windowed(draw, spec, depth)
    return {
        "root": root,
        "props": _props(draw),
        "nodes": spec.nodes,
        "sinks": [{"in": node, "topic": "out"}],
        "stores": spec.stores,
        "input": draw(_input(sorted(spec.sources))),
    }
