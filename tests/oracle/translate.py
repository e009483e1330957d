"""A topology spec built with strom and run through strom's TopologyTestDriver, giving the result the Java
runner (java/.../Oracle.java) gives for it, so the two compare with ``==``.

A spec is JSON: ``nodes`` (each an ``id``, an ``op``, its input ``in`` and the op's parameters, built in
order), ``sinks`` (a node id and an output ``topic``), ``stores`` (``name`` and ``kind``: kv, window,
session or versioned, the latter with ``as_of`` times) to read at the end, ``props`` (Streams config)
and ``input``: records (``topic``, base64 ``key`` and ``value`` or null, ``ts``, ``headers``) or
``{"advance": ms}`` (wall-clock time). The result has ``outputs`` (per sink topic, every record with
base64 key and value, ``ts`` and ``headers``) and ``stores`` (rows: [key, value], [key, start, end,
value] or, versioned, [key, as_of or None, value, timestamp], values rendered by ``render``), or
``error``. A node stored versioned has ``"versioned": {"history": ms}`` next to its ``store``.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from oracle import functions as f
from strom.streams import (
    Branched,
    Consumed,
    EmitStrategy,
    FixedKeyProcessor,
    Grouped,
    Joined,
    JoinWindows,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
    Materialized,
    Named,
    Processor,
    Produced,
    PunctuationType,
    Record,
    Repartitioned,
    Serdes,
    SessionWindows,
    SlidingWindows,
    Stores,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
    TopologyTestDriver,
    ValueTransformerWithKey,
)
from strom.streams.kstream.suppressed import BufferConfig
from strom.streams.kstream.windowed_kstream import TimeWindowedKStream

SERDES = {
    "String": Serdes.String,
    "Json": Serdes.String,
    "Long": Serdes.Long,
    "Integer": Serdes.Integer,
    "Double": Serdes.Double,
    "ByteArray": Serdes.ByteArray,
}


def serde(name: str) -> Any:
    return SERDES[name]()


def materialized(node: dict[str, Any]) -> Materialized:
    m = Materialized.as_(node["store"]) if node.get("store") else Materialized()
    if "versioned" in node:
        m = Materialized.as_(versioned_store(node))
    if "caching" in node:
        m = m.with_caching_enabled() if node["caching"] else m.with_caching_disabled()
    if "key_serde" in node:
        m = m.with_key_serde(serde(node["key_serde"]))
    if "value_serde" in node:
        m = m.with_value_serde(serde(node["value_serde"]))
    return m


def versioned_store(node: dict[str, Any]) -> Any:
    """A node's versioned store: ``{"store": name, "versioned": {"history": ms}}``."""
    return Stores.persistent_versioned_key_value_store(node["store"], node["versioned"]["history"])


def _versioned_rows(driver: TopologyTestDriver, store: dict[str, Any]) -> list[list[Any]]:
    """[key, as_of or None, value, timestamp] for each of KEYS at the latest and as of each of the
    store's ``as_of`` times, as Oracle.java's versionedRows (not valid_to, which Kafka's store leaves out)."""
    versioned = driver.get_versioned_key_value_store(store["name"])
    rows: list[list[Any]] = []
    for key in f.KEYS:
        for as_of in (None, *store.get("as_of", ())):
            record = versioned.get(key) if as_of is None else versioned.get(key, as_of)
            if record is not None:
                rows.append([key, as_of, render(record.value), record.timestamp])
    return rows


def _windows(w: dict[str, Any]) -> Any:
    kind = w["type"]
    if kind == "tumbling":
        return TimeWindows.of_size_and_grace(w["size"], w["grace"])
    if kind == "hopping":
        return TimeWindows.of_size_and_grace(w["size"], w["grace"]).advance_by(w["advance"])
    if kind == "sliding":
        return SlidingWindows.of_time_difference_and_grace(w["size"], w["grace"])
    return SessionWindows.of_inactivity_gap_and_grace(w["size"], w["grace"])


def _windowed_key(wk: Any, v: Any) -> tuple[str, Any]:
    return f"{wk.key}@{wk.window.start}/{wk.window.end}", v


def build_node(builder: StreamsBuilder, node: dict[str, Any], built: dict[str, Any]) -> Any:
    op = node["op"]
    src = built.get(node.get("in", ""))
    fn = node.get("fn")
    if op in ("stream", "table"):
        consumed = Consumed.with_(serde(node.get("key_serde", "String")),
                                  serde(node.get("value_serde", "Long")))
        if op == "stream":
            return builder.stream(node["topic"], consumed)
        return builder.table(node["topic"], consumed, materialized(node))
    if op in ("filter", "filter_not"):
        method = getattr(src, op)
        if isinstance(src, KTable) and node.get("store"):
            return method(f.predicate(fn), materialized(node))
        return method(f.predicate(fn))
    if op == "map_values":
        if isinstance(src, KTable) and node.get("store"):
            return src.map_values(f.map_value(fn), materialized(node))
        return src.map_values(f.map_value(fn))
    if op == "select_key":
        return src.select_key(f.select_key(fn))
    if op == "map":
        key_fn, value_fn = f.select_key(fn), f.map_value(node["value_fn"])
        return src.map(lambda k, v: (key_fn(k, v), value_fn(k, v)))
    if op == "flat_map_values":
        mapper = f.flat_map(fn)
        return src.flat_map_values(lambda v: mapper(v))
    if op == "merge":
        return src.merge(built[node["other"]])
    if op == "repartition":
        if "key_serde" in node:
            return src.repartition(Repartitioned.with_(serde(node["key_serde"]), serde(node["value_serde"])))
        return src.repartition()
    if op == "split":
        name = node["name"]
        branches = (
            src.split(Named.as_(name))
            .branch(f.predicate(fn), Branched.as_("x"))
            .default_branch(Branched.as_("y"))
        )
        return branches[name + ("x" if node["branch"] == 0 else "y")]
    if op == "to_table":
        return src.to_table(materialized(node))
    if op == "to_stream":
        return src.to_stream()
    if op == "windowed_to_stream":
        return src.to_stream().map(_windowed_key)
    if op == "group_by_key":
        return src.group_by_key()
    if op == "group_by":
        selector = f.select_key(fn)
        if isinstance(src, KStream):
            return src.group_by(selector)
        return src.group_by(lambda k, v: (selector(k, v), v))
    if op == "windowed_by":
        windowed = src.windowed_by(_windows(node["window"]))
        if node.get("emit") == "close":
            windowed = windowed.emit_strategy(EmitStrategy.on_window_close())
        return windowed
    if op == "count":
        return src.count(materialized(node))
    if op == "reduce":
        reducer = f.reduce(fn)
        if isinstance(src, KGroupedTable):
            return src.reduce(reducer, f.reduce(node.get("subtractor", "sub")), materialized(node))
        return src.reduce(reducer, materialized(node))
    if op == "aggregate":
        adder = f.reduce(fn)
        if isinstance(src, KGroupedTable):
            subtractor = f.reduce(node.get("subtractor", "sub"))
            return src.aggregate(lambda: 0, lambda k, v, a: adder(a, v), lambda k, v, a: subtractor(a, v),
                                 materialized(node))
        if isinstance(src, KGroupedStream | TimeWindowedKStream):
            return src.aggregate(lambda: 0, lambda k, v, a: adder(a, v), materialized(node))
        return src.aggregate(lambda: 0, lambda k, v, a: adder(a, v), lambda k, a1, a2: a1 + a2,
                             materialized(node))
    if op == "suppress":
        if node["kind"] == "until_window_closes":
            return src.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        buffer = (
            BufferConfig.max_records(node["max_records"]).emit_early_when_full()
            if node.get("max_records") is not None
            else BufferConfig.unbounded()
        )
        return src.suppress(Suppressed.until_time_limit(node["time_limit"], buffer))
    if op == "join":
        other = built[node["other"]]
        kind = node["kind"]
        joiner = f.join(fn)
        method = getattr(src, {"inner": "join", "left": "left_join", "outer": "outer_join"}[kind])
        if isinstance(src, KStream) and isinstance(other, KStream):
            w = node["window"]
            return method(other, joiner, JoinWindows.of_time_difference_and_grace(w["size"], w["grace"]))
        if isinstance(src, KTable) and node.get("store"):
            return method(other, joiner, materialized(node))
        return method(other, joiner)
    if op == "join_grace":
        method = src.left_join if node["kind"] == "left" else src.join
        return method(built[node["other"]], f.join(fn), Joined.with_().with_grace_period(node["grace"]))
    if op == "fk_join":
        method = src.left_join if node["kind"] == "left" else src.join
        fk = f.select_key(node.get("fk", "vmod3"))
        return method(built[node["other"]], lambda v: fk(None, v), f.join(fn), materialized(node))
    if op == "named_group_by":
        grouped = Grouped.as_(node["name"])
        if fn is None:
            return src.group_by_key(grouped)
        return src.group_by(f.select_key(fn), grouped)
    if op == "cogroup":
        return _cogroup(node, built)
    if op == "global_table":
        consumed = Consumed.with_(Serdes.String(), Serdes.Long())
        if node.get("store"):
            return builder.global_table(node["topic"], consumed, materialized(node))
        return builder.global_table(node["topic"], consumed)
    if op == "global_join":
        method = src.left_join if node["kind"] == "left" else src.join
        return method(built[node["other"]], f.select_key(node["key_fn"]), f.join(fn))
    if op == "state_store":
        name = node["name"]
        supplier = (Stores.persistent_key_value_store(name) if node["persistent"]
                    else Stores.in_memory_key_value_store(name))
        store_builder = Stores.key_value_store_builder(supplier, Serdes.String(), Serdes.Long())
        builder.add_state_store(store_builder.with_caching_enabled() if node["caching"]
                                else store_builder.with_caching_disabled())
        return None
    if op == "process":
        stores = [node["store"]] if node.get("store") else []
        if node.get("fixed_key"):
            return src.process_values(lambda: _NamedFixedKeyProcessor(node), *stores)
        return src.process(lambda: _NamedProcessor(node), *stores)
    if op == "transform_values":
        store = node.get("transformer_store")
        stores = [store] if store else []
        if node.get("store"):
            return src.transform_values(lambda: _NamedTransformer(fn, store), *stores,
                                        materialized=materialized(node))
        return src.transform_values(lambda: _NamedTransformer(fn, store), *stores)
    raise ValueError(f"unknown op {op!r}")


def _cogroup(node: dict[str, Any], built: dict[str, Any]) -> KTable:
    """KGroupedStream.cogroup of the node's grouped ``inputs``, each with its aggregator of ``fns``, then
    aggregate, per window when the node has a ``window``."""
    cogrouped = None
    for grouped_id, fn in zip(node["inputs"], node["fns"], strict=True):
        aggregator = f.cogroup_aggregator(fn)
        grouped = built[grouped_id]
        if cogrouped is None:
            cogrouped = grouped.cogroup(aggregator)
        else:
            cogrouped = cogrouped.cogroup(grouped, aggregator)
    assert cogrouped is not None
    if "window" not in node:
        return cogrouped.aggregate(lambda: 0, materialized(node))
    windowed = cogrouped.windowed_by(_windows(node["window"]))
    if node["window"]["type"] == "session":
        return windowed.aggregate(lambda: 0, lambda k, a1, a2: a1 + a2, materialized=materialized(node))
    return windowed.aggregate(lambda: 0, materialized=materialized(node))


def _schedule(node: dict[str, Any], context: Any, punctuator: Any) -> None:
    punctuate = node.get("punctuate")
    if punctuate:
        kind = PunctuationType.WALL_CLOCK_TIME if punctuate["type"] == "wall" else PunctuationType.STREAM_TIME
        context.schedule(punctuate["interval"], kind, punctuator)


class _Named:
    """A named processor's set-up: its store and its punctuation."""

    def __init__(self, node: dict[str, Any]) -> None:
        self.node, self.fn = node, node["fn"]
        self.store: Any = None

    def init(self, context: Any) -> None:
        self.context = context
        if self.node.get("store"):
            self.store = context.get_state_store(self.node["store"])
        _schedule(self.node, context, self.punctuate)

    def punctuate(self, timestamp: int) -> None:
        raise NotImplementedError


class _NamedProcessor(_Named, Processor):
    """Oracle.java's NamedProcessor: functions.process_record on each record, punctuate_store's entries
    forwarded at the punctuation's timestamp."""

    def punctuate(self, timestamp: int) -> None:
        for key, value in f.punctuate_store(self.fn, self.store):
            self.context.forward(Record(key, value, timestamp))

    def process(self, record: Record) -> None:
        outputs = f.process_record(self.fn, self.store, record.key, record.value, False)
        for key, value, offset, header in outputs:
            out = record.with_key(key).with_value(value).with_timestamp(record.timestamp + offset)
            if header:
                out.headers.add("p", b"\x01")
            self.context.forward(out)


class _NamedFixedKeyProcessor(_Named, FixedKeyProcessor):
    """Oracle.java's NamedFixedKeyProcessor: a punctuation forwards the latest record received, carrying
    the sum of the stored values (a fixed-key processor forwards only records derived from its input)."""

    def __init__(self, node: dict[str, Any]) -> None:
        super().__init__(node)
        self.last: Any = None

    def punctuate(self, timestamp: int) -> None:
        entries = f.punctuate_store(self.fn, self.store)
        if entries and self.last is not None:
            self.context.forward(self.last.with_value(sum(v for _, v in entries)).with_timestamp(timestamp))

    def process(self, record: Any) -> None:
        self.last = record
        for _, value, offset, header in f.process_record(self.fn, self.store, record.key, record.value, True):
            out = record.with_value(value).with_timestamp(record.timestamp + offset)
            if header:
                out.headers.add("p", b"\x01")
            self.context.forward(out)


class _NamedTransformer(ValueTransformerWithKey):
    def __init__(self, fn: str, store_name: str | None) -> None:
        self.fn, self.store_name = fn, store_name
        self.store: Any = None

    def init(self, context: Any) -> None:
        self.context = context
        if self.store_name:
            self.store = context.get_state_store(self.store_name)

    def transform(self, key: Any, value: Any) -> Any:
        return f.transform(self.fn, self.context, self.store, key, value)


def build(spec: dict[str, Any]) -> Any:
    builder = StreamsBuilder()
    built: dict[str, Any] = {}
    for node in spec["nodes"]:
        built[node["id"]] = build_node(builder, node, built)
    for sink in spec["sinks"]:
        source = built[sink["in"]]
        stream = source.to_stream() if isinstance(source, KTable) else source
        stream.to(sink["topic"], Produced.with_(serde(sink.get("key_serde", "String")),
                                                serde(sink.get("value_serde", "Long"))))
    return builder.build(props(spec))


def props(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "application.id": "oracle",
        "default.key.serde": Serdes.String(),
        "default.value.serde": Serdes.Long(),
        **spec.get("props", {}),
    }


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def render(value: Any) -> Any:
    """A store value as the Java runner renders it."""
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "value") and hasattr(value, "timestamp"):
        return render(value.value)
    if isinstance(value, bool):
        raise TypeError("booleans are not rendered")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return {"double_bits": struct.unpack(">q", struct.pack(">d", value))[0]}
    if isinstance(value, bytes | bytearray):
        return {"bytes": b64(bytes(value))}
    raise TypeError(f"cannot render {type(value)}")


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec's result on strom (an ``error`` entry when building or running raised)."""
    try:
        return _run(spec)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    topology = build(spec)
    wall_clock = spec.get("wall_clock", 0)
    with TopologyTestDriver(topology, props(spec), initial_wall_clock_time=wall_clock) as driver:
        for record in spec["input"]:
            if "advance" in record:
                driver.advance_wall_clock_time(record["advance"])
                continue
            headers = tuple((k, unb64(v)) for k, v in record.get("headers", ()))
            driver.pipe(record["topic"], unb64(record["key"]), unb64(record["value"]), record["ts"], headers)
        outputs: dict[str, list[dict[str, Any]]] = {}
        for sink in spec["sinks"]:
            rows = outputs.setdefault(sink["topic"], [])
            while (produced := driver.read_output(sink["topic"])) is not None:
                rows.append({
                    "key": b64(produced.key),
                    "value": b64(produced.value),
                    "ts": produced.timestamp,
                    "headers": [[k, b64(v)] for k, v in produced.headers],
                })
        stores: dict[str, list[list[Any]]] = {}
        for store in spec.get("stores", ()):
            stores[store["name"]] = _store_rows(driver, store)
        return {"outputs": outputs, "stores": stores}


def _store_rows(driver: TopologyTestDriver, store: dict[str, Any]) -> list[list[Any]]:
    name, kind = store["name"], store["kind"]
    if kind == "kv":
        return [[render(k), render(v)] for k, v in driver.get_key_value_store(name).all()]
    if kind == "versioned":
        return _versioned_rows(driver, store)
    if kind == "window":
        return [[render(wk.key), wk.window.start, wk.window.end, render(v)]
                for wk, v in driver.get_window_store(name).all()]
    sessions = driver.get_session_store(name)
    rows: list[list[Any]] = []
    for key in f.KEYS:
        rows.extend([render(wk.key), wk.window.start, wk.window.end, render(v)]
                    for wk, v in sessions.fetch(key))
    return rows
