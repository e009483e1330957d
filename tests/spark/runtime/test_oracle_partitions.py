"""The oracle over several partitions: generated specs run through Kafka Streams' TopologyTestDriver (one
partition) and through strom on Spark with every topic in three partitions, on the embedded broker.

Kafka's test driver has no partitions to spread records over, so the results compared are those that
do not depend on the spread (tests/oracle/partitioned.py draws only such specs): a stream's output as a
multiset, a table's final value per key, its stores' final contents. What that checks is strom's own
partitioned machinery against Kafka's semantics: repartition topics, co-partitioned joins, foreign-key
subscriptions and responses between tasks, table re-grouping, each task with its own stores.

Many specs run at once, as one application (each under its own topic and store names), so a batch costs
one Spark start-up. STROM_ORACLE_PARTITIONED_CASES sets the specs per batch; STROM_ORACLE_EXPLORE=1 draws
new ones. A spec that differs is written to .cache/oracle/failed/partitioned-<n>.json: keep it in
tests/oracle/partitioned_cases/, where every later run includes it.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, given, settings

from oracle import functions, translate
from oracle.java_oracle import ROOT, JavaOracle
from oracle.partitioned import partition_free_topologies
from strom.kafka import clients
from strom.kafka.clients import JAVA_PARTITIONER
from strom.spark.runtime import SparkStreams
from strom.streams import Produced, QueryableStoreTypes, StoreQueryParameters, StreamsBuilder
from strom.streams.kstream.ktable import KTable
from support.kafka import Record, produce, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

PARTITIONS = 3
SHIFT = 3_000_000  # a multiple of every window size and advance drawn
CASES = int(os.environ.get("STROM_ORACLE_PARTITIONED_CASES", "20"))
EXPLORE = bool(os.environ.get("STROM_ORACLE_EXPLORE"))
KEPT = Path(__file__).parents[2] / "oracle" / "partitioned_cases"
FAILED = ROOT / ".cache" / "oracle" / "failed"
BATCHES = {
    "cached": {"topology.optimization": "none", "statestore.cache.max.bytes": 10 * 1024 * 1024},
    "uncached-optimized": {"topology.optimization": "all", "statestore.cache.max.bytes": 0},
}


@pytest.fixture(scope="module", autouse=True)
def _oracle_shipped_by_value() -> None:
    """The specs' functions live in tests/oracle, which Spark's Python workers cannot import: shipped
    inside the pickled topology instead."""
    from pyspark import cloudpickle

    for module in (translate, functions):
        cloudpickle.register_pickle_by_value(module)


def drawn_specs(count: int, cached: bool) -> list[dict[str, Any]]:
    """``count`` specs from the strategy, the same ones each run unless STROM_ORACLE_EXPLORE is set."""
    specs: list[dict[str, Any]] = []
    if count == 0:
        return specs
    repeatable: dict[str, Any] = {} if EXPLORE else {"derandomize": True, "database": None}

    @settings(max_examples=count, phases=[Phase.generate], deadline=None, **repeatable)
    @given(spec=partition_free_topologies(cached))
    def collect(spec: dict[str, Any]) -> None:
        specs.append(spec)

    collect()
    return specs


def shifted(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its records SHIFT ms later: a producer takes timestamp 0 for "now"."""
    inputs = [{**r, "ts": r["ts"] + SHIFT} if "ts" in r else r for r in spec["input"]]
    return {**spec, "input": inputs}


def renamed(spec: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``spec`` under its own topic, store and branch names, so that many share one application."""
    spec = json.loads(json.dumps(spec))
    for node in spec["nodes"]:
        for field in ("topic", "store", "name"):
            if node.get(field):
                node[field] = f"{prefix}{node[field]}"
    for entry in [*spec["sinks"], *spec["input"]]:
        if "topic" in entry:
            entry["topic"] = f"{prefix}{entry['topic']}"
    for store in spec["stores"]:
        store["name"] = f"{prefix}{store['name']}"
    return spec


def add_to(builder: StreamsBuilder, spec: dict[str, Any]) -> None:
    built: dict[str, Any] = {}
    for node in spec["nodes"]:
        built[node["id"]] = translate.build_node(builder, node, built)
    for sink in spec["sinks"]:
        source = built[sink["in"]]
        (source.to_stream() if isinstance(source, KTable) else source).to(sink["topic"], Produced.with_(
            translate.serde("String"), translate.serde("Long")))


def view(root: str, records: list[tuple[str | None, str | None]]) -> Any:
    """What every spread over partitions agrees on: a stream's records as a multiset, a table's latest
    value per key (a tombstone removes the key)."""
    if root == "stream":
        return Counter(records)
    table: dict[str | None, str] = {}
    for key, value in records:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def expected_of(oracle: JavaOracle, spec: dict[str, Any]) -> dict[str, Any]:
    result = oracle.run(spec)
    assert "error" not in result, f"Kafka Streams rejected the spec (a generator bug): {result['error']}"
    records = [(r["key"], r["value"]) for r in result["outputs"]["out"]]
    stores = {name: sorted(rows, key=json.dumps) for name, rows in result["stores"].items()}
    return {"out": view(spec["root"], records), "stores": stores}


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def produce_input(bootstrap: str, specs: list[dict[str, Any]]) -> None:
    records = [(r["topic"], Record(translate.unb64(r["key"]), translate.unb64(r["value"]), timestamp=r["ts"]))
               for spec in specs for r in spec["input"] if "topic" in r]
    for topic in {topic for topic, _ in records}:
        produce(bootstrap, topic, [record for t, record in records if t == topic], **JAVA_PARTITIONER)


def actual_of(app: SparkStreams, bootstrap: str, spec: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The result of ``spec`` from its ``run`` (the spec renamed) in the application."""
    records = [(b64(m.key()), b64(m.value())) for m in read_topic(bootstrap, run["sinks"][0]["topic"])]
    stores = {store["name"]: sorted(store_rows(app, renamed_store), key=json.dumps)
              for store, renamed_store in zip(spec["stores"], run["stores"], strict=True)}
    return {"out": view(spec["root"], records), "stores": stores}


def store_rows(app: SparkStreams, store: dict[str, str]) -> list[list[Any]]:
    """A store's entries as the oracle writes them."""
    render, kind = translate.render, store["kind"]
    if kind == "kv":
        query = StoreQueryParameters.from_name(store["name"], QueryableStoreTypes.key_value_store())
        return [[render(k), render(v)] for k, v in app.store(query).all()]
    if kind == "window":
        query = StoreQueryParameters.from_name(store["name"], QueryableStoreTypes.window_store())
        windows = app.store(query)
        return [[render(wk.key), wk.window.start, wk.window.end, render(v)] for wk, v in windows.all()]
    query = StoreQueryParameters.from_name(store["name"], QueryableStoreTypes.session_store())
    sessions = app.store(query)
    return [[render(wk.key), wk.window.start, wk.window.end, render(v)]
            for key in functions.KEYS for wk, v in sessions.fetch(key)]


def kept_specs() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(KEPT.glob("*.json"))]


@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_specs_over_three_partitions_agree_with_kafka_streams(batch, java_oracle, broker, spark, tmp_path):
    props = BATCHES[batch]
    drawn = drawn_specs(CASES, cached=props["statestore.cache.max.bytes"] > 0)
    specs = [{**shifted(spec), "props": props} for spec in [*kept_specs(), *drawn]]
    expected = [expected_of(java_oracle, spec) for spec in specs]

    app_id = f"oracle-partitioned-{uuid.uuid4().hex[:8]}"
    runs = [renamed(spec, f"{app_id}-{i}-") for i, spec in enumerate(specs)]
    topics = {n["topic"] for spec in runs for n in spec["nodes"] if n["op"] in ("stream", "table")}
    topics |= {spec["sinks"][0]["topic"] for spec in runs}
    clients.create_topics(broker.bootstrap_servers, {topic: PARTITIONS for topic in topics})
    builder = StreamsBuilder()
    for spec in runs:
        add_to(builder, spec)
    produce_input(broker.bootstrap_servers, runs)

    config = {**translate.props({"props": props}), "application.id": app_id,
              "bootstrap.servers": broker.bootstrap_servers, "processing.guarantee": "exactly_once_v2",
              "state.dir": str(tmp_path)}
    app = SparkStreams(builder.build(config), config, spark)
    app.start()
    try:
        assert app.wait_until_caught_up(300), f"lag {app.lag()}"
        actual = [actual_of(app, broker.bootstrap_servers, spec, run)
                  for spec, run in zip(specs, runs, strict=True)]
    finally:
        app.stop()

    differing = [i for i in range(len(specs)) if actual[i] != expected[i]]
    FAILED.mkdir(parents=True, exist_ok=True)
    for i in differing:
        (FAILED / f"partitioned-{i}.json").write_text(json.dumps(specs[i], indent=1) + "\n")
    assert not differing, "strom over 3 partitions differs from Kafka Streams on:\n" + "\n".join(
        f"{json.dumps(specs[i])}\n  strom: {actual[i]}\n  kafka: {expected[i]}" for i in differing)
