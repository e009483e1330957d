"""A KStream aggregation (and a tumbling windowed one) fused into its source's chain (the fused steps
over the store's fused read-modify-write lines) gives exactly what the per-record path gives: the same
forwarded records in the same order with the same timestamps and headers, the same changelog, the same
store contents and committed offsets, the same drops and the same errors, with caching on (evictions
mid-run and flushes at commit) and off, in memory and in RocksDB."""

from __future__ import annotations

import pytest

from strom.errors import ProcessingError, SerializationError
from strom.kafka.serdes import Serdes
from strom.streams import EmitStrategy, Materialized, Produced, Stores, StreamsBuilder, StreamsConfig
from strom.streams.kstream.windowed_serdes import WindowedSerdes
from strom.streams.kstream.windows import TimeWindows
from strom.streams.processor import ConsumerRecord, TaskId, TopicPartition
from strom.streams.processor.internals.task import StreamTask
from strom.streams.state.cache import ThreadCache
from strom.streams.state.window import builders

S, L, D = Serdes.String(), Serdes.Long(), Serdes.Double()
KEYS = 60


class HeaderSink:
    """Keeps every record sent (topic, key, value, timestamp, headers), delivering at flush."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []
        self.pending: list[tuple[str, int]] = []
        self.offsets: dict[tuple[str, int], int] = {}

    def send(self, collector, topic, partition, key, value, timestamp, headers):
        self.sent.append((topic, key, value, timestamp, tuple(headers or ())))
        self.pending.append((topic, partition or 0))

    def flush(self, collector):
        for topic, partition in self.pending:
            offset = self.offsets.get((topic, partition), -1) + 1
            self.offsets[(topic, partition)] = offset
            collector.delivered(topic, partition, offset)
        self.pending.clear()


def records(n: int = 400) -> list[ConsumerRecord]:
    """Keys repeat and arrive out of timestamp order; some keys and values are null; some headers."""
    out = []
    for i in range(n):
        key = None if i % 37 == 5 else b"k%d" % ((i * 7) % KEYS)
        value = None if i % 41 == 3 else b"%d" % (i % 10)
        timestamp = 1000 + i * 3 - (i % 5) * 40  # later records may carry earlier timestamps
        headers = [("h", b"%d" % i)] if i % 11 == 0 else None
        out.append(ConsumerRecord("in", 0, i, timestamp, key, value, headers=headers))
    return out


def run(build, tmp_path, fused: bool, cache_bytes: int, commit_every: int = 90):
    """Everything the task sent, its committed offsets, its store's contents, the chain's source."""
    builder = StreamsBuilder()
    build(builder)
    config = StreamsConfig({"application.id": "app", "state.dir": str(tmp_path),
                            "default.key.serde": "String", "default.value.serde": "String"})
    sink = HeaderSink()
    task = StreamTask(TaskId(0, 0), builder.build().internal, config, sink, ThreadCache(cache_bytes))
    task.initialize()
    task.complete_restoration()
    source = task.sources["in"]
    if not fused:
        source.chain = None
        for node in task.nodes.values():  # a flushed update goes on as a Record, step by step
            node.context.forward_fields = node.context.forward_record_fields
    aggregation = next(node for node in task.nodes.values() if node.stores)
    chain = source.chain
    inputs = records()
    partition = TopicPartition("in", 0)
    offsets = []
    store = task.context.stores["agg"]
    caching = store.wrapped
    if not fused and hasattr(caching, "flush_batch"):  # a flush's entries one by one through the layers
        caching.flush_batch = caching.flush_each
    contents = []
    for start in range(0, len(inputs), commit_every):
        task.add_records(partition, inputs[start:start + commit_every])
        task.process_all()
        contents.append(sorted(store.all(), key=repr))  # read through the cache: uncommitted entries
        offsets.append(task.committable_offsets_and_metadata())
        task.commit()
    contents.append(sorted(store.all(), key=repr))
    dropped = task.metrics.dropped_records
    task.close()
    return sink.sent, offsets, contents, dropped, chain, flush_fused(aggregation), batch_fused(caching)


def flush_fused(node) -> bool:
    """Updates the node's cache flushed went downstream through a fused chain."""
    return getattr(node.context.forward_fields, "__name__", "") == "chain"


def batch_fused(caching) -> bool:
    """The store's cache flushed through its compiled loop (the layers' writes and the listener inlined)."""
    return getattr(getattr(caching, "flush_batch", None), "__name__", "") == "flush"


def inlined(chain) -> bool:
    """The fused chain writes the record cache itself (the store's fused lines are in it)."""
    return chain is not None and any(name.endswith("put_dirty") for name in chain.__globals__)


def count(builder: StreamsBuilder, materialized: Materialized) -> None:
    builder.stream("in").group_by_key().count(materialized=materialized).to_stream().to(
        "out", Produced.with_(S, L))


def count_after_steps(builder: StreamsBuilder, materialized: Materialized) -> None:
    """Stateless steps first: the aggregation's entry stamps the record context (skipped when fused)."""
    (builder.stream("in").filter(lambda k, v: v != "7").map_values(lambda v: None if v is None else v + "x")
     .group_by_key().count(materialized=materialized).to_stream().to("out", Produced.with_(S, L)))


def reduce_strings(builder: StreamsBuilder, materialized: Materialized) -> None:
    """A variable-width aggregate: no fixed-width pair codec, the decoder's path."""
    builder.stream("in").group_by_key().reduce(lambda agg, v: (agg + v)[-12:], materialized=materialized
                                               ).to_stream().to("out")


def sum_doubles(builder: StreamsBuilder, materialized: Materialized) -> None:
    """An int aggregate into a Double store: written as the float the serde makes, read back a float."""
    builder.stream("in").group_by_key().aggregate(
        lambda: 0, lambda k, v, agg: agg + int(v) if isinstance(agg, int) else agg + 0.5,
        materialized=materialized.with_value_serde(D)).to_stream().to("out", Produced.with_(S, D))


BUILDS = [count, count_after_steps, reduce_strings, sum_doubles]


def windowed_count(store: str, caching: bool, emit: EmitStrategy, size: int = 200):
    """Tumbling windows with a grace shorter than the input's disorder: some records are late."""
    windows = TimeWindows.of_size_and_grace(size, 50)
    supplier = (builders.in_memory_timestamped_window_store if store == "memory"
                else builders.persistent_timestamped_window_store)("agg", 10_000, size)
    materialized = Materialized.as_(supplier)
    if not caching:
        materialized = materialized.with_caching_disabled()
    key_serde = WindowedSerdes.time_windowed_serde_from(S, size)

    def build(builder: StreamsBuilder) -> None:
        (builder.stream("in").group_by_key().windowed_by(windows).emit_strategy(emit)
         .count(materialized=materialized).to_stream().to("out", Produced.with_(key_serde, L)))

    return build


def materialized(store: str, caching: bool) -> Materialized:
    supplier = (Stores.in_memory_key_value_store if store == "memory" else Stores.persistent_key_value_store)
    result = Materialized.as_(supplier("agg"))
    return result if caching else result.with_caching_disabled()


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
@pytest.mark.parametrize("cache_bytes", [12_000, 1 << 20], ids=["evicting", "large"])
@pytest.mark.parametrize("build", BUILDS, ids=lambda f: f.__name__)
def test_the_fused_aggregation_gives_what_the_per_record_path_gives(tmp_path, build, store, cache_bytes):
    def topology(builder):
        build(builder, materialized(store, caching=True))

    fused = run(topology, tmp_path / "fused", True, cache_bytes)
    plain = run(topology, tmp_path / "plain", False, cache_bytes)
    assert inlined(fused[4]) and plain[4] is None  # the fused run did take the inlined store path
    assert fused[5] and not plain[5]  # and flushed updates went on through a fused chain
    assert fused[6] and not plain[6]  # a flush's entries went down and on in one compiled loop
    assert fused[:4] == plain[:4]
    sent = fused[0]
    assert any(topic == "out" for topic, *_ in sent) and any("changelog" in topic for topic, *_ in sent)
    assert fused[3] > 0  # null keys and values were dropped, and counted


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
@pytest.mark.parametrize("cache_bytes", [12_000, 1 << 20], ids=["evicting", "large"])
@pytest.mark.parametrize("logged", [True, False], ids=["logged", "unlogged"])
def test_a_cached_table_flushes_in_one_loop_as_entry_by_entry(tmp_path, store, cache_bytes, logged):
    """A table source over a cached store: its null values are tombstones, which the compiled flush
    hands to the per-entry path (deleting a key, or nothing for a key never stored), in order. Without
    a changelog the compiled flush writes the transaction buffer only."""
    def topology(builder):
        stored = materialized(store, caching=True)
        builder.table("in", materialized=stored if logged else stored.with_logging_disabled()
                      ).to_stream().to("out")

    fused = run(topology, tmp_path / "fused", True, cache_bytes)
    plain = run(topology, tmp_path / "plain", False, cache_bytes)
    assert fused[6] and not plain[6]
    assert fused[:4] == plain[:4]
    sent = fused[0]
    assert any(topic == "out" and value is None for topic, _, value, *_ in sent)  # a deletion went on
    assert any("changelog" in topic and value is None for topic, _, value, *_ in sent) is logged


@pytest.mark.parametrize("build", BUILDS, ids=lambda f: f.__name__)
def test_an_uncached_fused_aggregation_forwards_each_update_as_before(tmp_path, build):
    def topology(builder):
        build(builder, materialized("memory", caching=False))

    fused = run(topology, tmp_path / "fused", True, 1 << 20)
    plain = run(topology, tmp_path / "plain", False, 1 << 20)
    assert fused[4] is not None
    assert fused[:4] == plain[:4]
    assert len([1 for topic, *_ in fused[0] if topic == "out"]) > 300  # one per counted record


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
@pytest.mark.parametrize("cache_bytes", [12_000, 1 << 20], ids=["evicting", "large"])
def test_a_fused_windowed_count_gives_what_the_per_record_path_gives(tmp_path, store, cache_bytes):
    build = windowed_count(store, True, EmitStrategy.on_window_update())
    fused = run(build, tmp_path / "fused", True, cache_bytes)
    plain = run(build, tmp_path / "plain", False, cache_bytes)
    assert inlined(fused[4]) and plain[4] is None
    assert fused[5] and not plain[5]  # flushed windows went on fused, to_stream and the sink inlined
    assert fused[:4] == plain[:4]
    assert fused[3] > sum(1 for r in records() if r.key is None or r.value is None)  # late ones too
    assert any(topic == "out" for topic, *_ in fused[0])


@pytest.mark.parametrize("caching, emit", [(False, EmitStrategy.on_window_update()),
                                           (True, EmitStrategy.on_window_close())])
def test_a_windowed_count_that_forwards_per_record_is_not_fused(tmp_path, caching, emit):
    _, _, _, _, chain, _, _ = run(windowed_count("memory", caching, emit), tmp_path, True, 1 << 20)
    assert chain is None


def test_a_cached_count_is_inlined_and_counts_exactly(tmp_path):
    """The fused chain writes the cache itself (no call of the processor per record), and the counts
    and their timestamps (the largest of the key's records) are the exact ones."""
    def topology(builder):
        count(builder, materialized("memory", caching=True))

    sent, _, contents, dropped, chain, _, _ = run(topology, tmp_path, True, 1 << 20, commit_every=400)
    assert inlined(chain)
    expected: dict[str, tuple[int, int]] = {}
    for record in records():
        if record.key is None or record.value is None:
            continue
        n, timestamp = expected.get(record.key.decode(), (0, -1))
        expected[record.key.decode()] = (n + 1, max(timestamp, record.timestamp))
    assert [(key, (vat.value, vat.timestamp)) for key, vat in contents[-1]] == sorted(expected.items())
    out = {key.decode(): (L.deserializer().deserialize("out", value), timestamp)
           for topic, key, value, timestamp, _ in sent if topic == "out"}
    assert out == expected
    assert dropped == sum(1 for r in records() if r.key is None or r.value is None)


def test_a_value_the_store_serde_refuses_fails_as_the_per_record_path(tmp_path):
    """An aggregate the Long serde cannot take: the serde's own error, fused or not."""
    def topology(builder):
        builder.stream("in").group_by_key().aggregate(
            lambda: 0, lambda k, v, agg: agg + 0.5,
            materialized=Materialized.as_("agg").with_value_serde(L)).to_stream().to("out")

    errors = []
    for fused in (True, False):
        with pytest.raises((ProcessingError, SerializationError)) as raised:
            run(topology, tmp_path / str(fused), fused, 1 << 20)
        errors.append((type(raised.value), str(raised.value)))
    assert errors[0] == errors[1]
    assert "Long cannot serialize float" in errors[0][1]
