"""One suite for every key-value store: in-memory and RocksDB, with and without the caching and
logging layers; all must behave as Kafka's KeyValueStore (ordered by serialized key)."""

from __future__ import annotations

import tempfile
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.errors import InvalidStateStoreError, NullKeyError
from strom.kafka.serdes import Serdes
from strom.streams.state.stores import Stores

SUPPLIERS = {"memory": Stores.in_memory_key_value_store, "rocksdb": Stores.persistent_key_value_store}
LAYERS = {"plain": (False, False), "logged": (False, True), "cached": (True, False),
          "cached+logged": (True, True)}


@pytest.fixture(params=[(s, layer) for s in SUPPLIERS for layer in LAYERS], ids=lambda p: "-".join(p))
def store(request, host):
    supplier_name, layer = request.param
    caching, logging = LAYERS[layer]
    builder = Stores.key_value_store_builder(SUPPLIERS[supplier_name]("kv"), Serdes.String(), Serdes.Long())
    builder = builder.with_caching_enabled() if caching else builder.with_caching_disabled()
    builder = builder.with_logging_enabled() if logging else builder.with_logging_disabled()
    store = host.init(builder)
    yield store
    if store.is_open:
        store.close()


def fill(store, keys):
    for i, key in enumerate(keys):
        store.put(key, i)


def test_put_get_overwrite_delete(store):
    assert store.get("a") is None
    store.put("a", 1)
    store.put("a", 2)
    assert store.get("a") == 2
    assert store.delete("a") == 2
    assert store.get("a") is None
    assert store.delete("a") is None
    store.put("b", 3)
    store.put("b", None)
    assert store.get("b") is None


def test_put_if_absent_and_put_all(store):
    assert store.put_if_absent("k", 1) is None
    assert store.put_if_absent("k", 2) == 1
    assert store.get("k") == 1
    store.put_all([("x", 7), ("y", 8), ("k", None)])
    assert (store.get("x"), store.get("y"), store.get("k")) == (7, 8, None)


def test_range_scans_are_ordered_by_key_bytes_and_inclusive(store):
    fill(store, ["d", "b", "a", "e", "c", "B"])
    assert [k for k, _ in store.all()] == ["B", "a", "b", "c", "d", "e"]
    assert [k for k, _ in store.reverse_all()] == ["e", "d", "c", "b", "a", "B"]
    assert list(store.range("b", "d")) == [("b", 1), ("c", 4), ("d", 0)]
    assert [k for k, _ in store.reverse_range("b", "d")] == ["d", "c", "b"]
    assert [k for k, _ in store.range(None, "b")] == ["B", "a", "b"]
    assert [k for k, _ in store.range("d", None)] == ["d", "e"]
    assert list(store.range("d", "b")) == []


def test_range_sees_deletes_and_overwrites(store):
    fill(store, ["a", "b", "c"])
    store.delete("b")
    store.put("c", 100)
    store.put("bb", 5)
    assert list(store.all()) == [("a", 0), ("bb", 5), ("c", 100)]


def test_prefix_scan(store):
    fill(store, ["user:1", "user:2", "userx", "admin:1", "user:10"])
    keys = [k for k, _ in store.prefix_scan("user:", Serdes.String())]
    assert keys == ["user:1", "user:10", "user:2"]
    assert list(store.prefix_scan("zzz", Serdes.String())) == []


def test_integer_keys_order_by_big_endian_bytes(host):
    store = host.init(Stores.key_value_store_builder(Stores.persistent_key_value_store("ints"),
                                                     Serdes.Integer(), Serdes.String()))
    for key in [300, 2, 70000, 1]:
        store.put(key, str(key))
    assert [k for k, _ in store.all()] == [1, 2, 300, 70000]
    assert list(store.range(2, 300)) == [(2, "2"), (300, "300")]
    store.close()


def test_approximate_num_entries_and_metadata(store, host):
    fill(store, [f"k{i}" for i in range(50)])
    host.commit()
    assert 40 <= store.approximate_num_entries() <= 60
    assert store.name == "kv"
    assert store.persistent == (store.metrics_scope == "rocksdb")
    assert store.metrics.counts["put"] == 50


def test_many_keys(store, host):
    for i in range(3000):
        store.put(f"{i:05d}", i)
    host.commit()
    for i in range(0, 3000, 2):
        store.delete(f"{i:05d}")
    assert [v for _, v in store.all()] == list(range(1, 3000, 2))


def test_none_key_and_closed_store_raise_clear_errors(store):
    with pytest.raises(NullKeyError, match="None key"):
        store.put(None, 1)
    store.close()
    assert not store.is_open
    with pytest.raises(InvalidStateStoreError, match="not open"):
        store.get("a")


def test_wrong_value_type_is_a_serialization_error(store):
    from strom.errors import SerializationError
    with pytest.raises(SerializationError):
        store.put("a", "not a long")


def test_rocksdb_store_in_use_gives_a_clear_error(make_host):
    from strom.errors import ProcessorStateError
    builder = lambda: Stores.key_value_store_builder(  # noqa: E731
        Stores.persistent_key_value_store("kv"), Serdes.String(), Serdes.Long())
    first = make_host("same").init(builder())
    with pytest.raises(ProcessorStateError, match=r"own state\.dir"):
        make_host("same").init(builder())
    first.close()


BYTE_OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.binary(max_size=3), st.binary(min_size=1, max_size=2)),
    st.tuples(st.just("delete"), st.binary(max_size=3), st.just(b"")),
    st.tuples(st.just("bulk"), st.integers(0, 200), st.just(b"")),
    st.tuples(st.just("scan"), st.binary(max_size=2), st.binary(max_size=2)),
), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=BYTE_OPS)
def test_in_memory_store_scans_match_a_sorted_model(host, ops):
    from strom.streams.state.memory import InMemoryKeyValueStore
    store = InMemoryKeyValueStore("model")
    store.init(host, store)
    model: dict[bytes, bytes] = {}
    for op, a, b in ops:
        if op == "put":
            store.put(a, b)
            model[a] = b
        elif op == "delete":
            store.put(a, None)
            model.pop(a, None)
        elif op == "bulk":  # enough new keys to take the re-sort path
            for i in range(a):
                store.put(b"%03d" % i, b"v")
                model[b"%03d" % i] = b"v"
        else:
            low, high = min(a, b), max(a, b)
            expected = sorted((k, v) for k, v in model.items() if low <= k <= high)
            assert list(store.range(low, high)) == expected
        assert list(store.all()) == sorted(model.items())
        assert list(store.reverse_all()) == sorted(model.items(), reverse=True)
        assert store.approximate_num_entries() == len(model)


def test_timestamped_store_needs_value_and_timestamp(host):
    from strom.errors import SerializationError
    from strom.streams.state.timestamped import ValueAndTimestamp
    store = host.init(Stores.timestamped_key_value_store_builder(
        Stores.in_memory_key_value_store("ts"), Serdes.String(), Serdes.Long()))
    with pytest.raises(SerializationError, match=r"ValueAndTimestamp\.make"):
        store.put("a", 5)
    store.put("a", ValueAndTimestamp.make(5, 10))
    store.put("b", ValueAndTimestamp.make(None, 10))
    assert list(store.all()) == [("a", ValueAndTimestamp(5, 10))]
    assert ValueAndTimestamp.get_value_or_null(store.get("a")) == 5
    assert ValueAndTimestamp.get_value_or_null(store.get("b")) is None


@pytest.mark.parametrize("kind", sorted(SUPPLIERS))
@pytest.mark.parametrize("caching", [False, True])
def test_prefix_scan_bounds_with_0xff_bytes(host, kind, caching):
    builder = Stores.key_value_store_builder(SUPPLIERS[kind]("raw"), Serdes.ByteArray(), Serdes.ByteArray())
    store = host.init(builder.with_caching_enabled() if caching else builder)
    keys = [b"a", b"a\xff", b"a\xff\x00", b"a\xff\xff", b"b", b"\xff", b"\xff\x01", b""]
    for key in keys:
        store.put(key, b"v")
    host.commit()
    store.put(b"a\xff\x05", b"w")  # uncommitted, and cached when caching is on
    scan = lambda prefix: [k for k, _ in store.prefix_scan(prefix, Serdes.ByteArray())]  # noqa: E731
    assert scan(b"a\xff") == [b"a\xff", b"a\xff\x00", b"a\xff\x05", b"a\xff\xff"]
    assert scan(b"\xff") == [b"\xff", b"\xff\x01"]
    assert scan(b"a") == [b"a", b"a\xff", b"a\xff\x00", b"a\xff\x05", b"a\xff\xff"]
    assert len(scan(b"")) == len(keys) + 1
    store.close()


def test_store_names_and_suppliers_are_validated():
    from strom.errors import TopologyError
    with pytest.raises(TopologyError, match="Invalid store name 'my store'"):
        Stores.in_memory_key_value_store("my store")
    with pytest.raises(TopologyError, match="not a key-value store supplier"):
        Stores.key_value_store_builder("counts", Serdes.String(), Serdes.Long())
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("ok.name-1"), None, None)
    assert (builder.name, builder.caching_enabled, builder.logging_enabled) == ("ok.name-1", False, True)
    builder.with_logging_enabled({"retention.ms": "1000"}).with_caching_enabled()
    assert builder.log_config == {"retention.ms": "1000"} and builder.caching_enabled
    builder.with_logging_disabled().with_caching_disabled()
    assert (builder.logging_enabled, builder.log_config, builder.caching_enabled) == (False, {}, False)


def test_store_without_serdes_uses_the_default_serdes(host):
    store = host.init(Stores.key_value_store_builder(Stores.in_memory_key_value_store("d"), None, None))
    store.put("k", "v")  # the host's defaults are String serdes
    assert store.get("k") == "v"
    assert store.wrapped.get(b"k") is not None


def test_iterating_a_store_closed_under_the_iterator_fails_clearly(host):
    store = host.init(Stores.key_value_store_builder(Stores.persistent_key_value_store("it"),
                                                     Serdes.String(), Serdes.Long()))
    for i in range(5):
        store.put(f"k{i}", i)
    host.commit()
    iterator = store.all()
    assert next(iterator) == ("k0", 0)
    store.close()
    with pytest.raises(InvalidStateStoreError, match="closed while an iterator"):
        next(iterator)


def test_key_index_stays_small_without_scans_and_scans_stay_correct():
    from strom.streams.state.key_index import INSERT_LIMIT, SortedKeyIndex
    index, keys = SortedKeyIndex(), {}
    for round_ in range(50):  # churn: keys come and go, nobody scans
        for i in range(100):
            key = b"%02d-%03d" % (round_ % 7, i)
            if key not in keys:
                index.added(key)
            keys[key] = None
        for key in [k for k in keys if k.endswith(b"5")]:
            del keys[key]
            index.removed()
        assert len(index._new) <= INSERT_LIMIT and len(index._index) <= len(keys) + INSERT_LIMIT
    assert index.between(keys, b"03", b"04") == sorted(k for k in keys if b"03" <= k <= b"04")
    index.added(b"03-x")
    keys[b"03-x"] = None
    assert index.between(keys, b"03-", b"03-z")[-1] == b"03-x"


def test_key_index_adds_a_batch_under_one_lock():
    import threading

    from strom.streams.state.key_index import INSERT_LIMIT, SortedKeyIndex
    index, keys = SortedKeyIndex(), {}
    with index.adding() as added:
        for key in (b"b", b"a"):
            keys[key] = None
            added.append(key)
        scanned = []
        scan = threading.Thread(target=lambda: scanned.append(index.between(keys, None, None)))
        scan.start()
        scan.join(0.2)
        assert scan.is_alive() and not scanned  # the scan waits for the batch
        keys[b"c"] = None
        added.append(b"c")
    scan.join()
    assert scanned == [[b"a", b"b", b"c"]]
    with index.adding() as added:  # more than INSERT_LIMIT new keys: re-sorted by the next scan
        for i in range(INSERT_LIMIT + 1):
            keys[b"d%03d" % i] = None
            added.append(b"d%03d" % i)
    assert index._new == [] and index.between(keys, b"c", b"d001") == [b"c", b"d000", b"d001"]


def test_in_memory_write_batch_of_a_dicts_items_equals_writing_pair_by_pair():
    """A commit's write buffer (a dict's items) goes into the in-memory store in one update when its key
    index re-sorts at the next scan anyway; the store then holds and scans what writing each pair
    gives, deletes of present and absent keys included, scans between the batches or not."""
    import random

    from strom.streams.state.memory import InMemoryKeyValueStore
    rng = random.Random(18)
    fast, each = InMemoryKeyValueStore("fast"), InMemoryKeyValueStore("each")
    for store in (fast, each):
        store.init(None, store)  # type: ignore[arg-type]
    for round_ in range(12):
        writes = {b"k%03d" % rng.randrange(400): None if rng.random() < 0.25 else b"v%d" % round_
                  for _ in range(150)}
        fast.write_batch(writes.items(), round_)
        each.write_batch(list(writes.items()), round_)
        assert fast._data == each._data and fast.committed_offset == each.committed_offset == round_
        if round_ % 3 == 2:
            assert list(fast.all()) == list(each.all()) == sorted(each._data.items())
            assert list(fast.range(b"k100", b"k200")) == list(each.range(b"k100", b"k200"))
    assert list(fast.all()) == sorted(each._data.items())


@pytest.mark.parametrize("kind", sorted(SUPPLIERS))
def test_interactive_queries_from_another_thread_while_the_task_writes(host, kind):
    import threading
    builder = Stores.key_value_store_builder(SUPPLIERS[kind]("iq"), Serdes.String(), Serdes.Long())
    store = host.init(builder.with_caching_enabled())
    store.set_flush_listener(lambda *change: None, False)
    host.cache.resize(2_000)  # small: evictions and flushes happen while the reader scans
    stop, errors, scans = threading.Event(), [], [0]

    def query() -> None:
        try:
            while not stop.is_set():
                keys = [k for k, _ in store.range("k000", "k999")]
                assert keys == sorted(set(keys)) and all("k000" <= k <= "k999" for k in keys)
                store.get("k001")
                scans[0] += 1
        except Exception as exc:  # reported to the test thread
            errors.append(exc)

    reader = threading.Thread(target=query)
    reader.start()
    try:
        for i in range(4_000):
            key = f"k{i * 7919 % 1000:03d}"
            store.delete(key) if i % 5 == 0 else store.put(key, i)
            if i % 500 == 499:
                host.commit()
    finally:
        stop.set()
        reader.join()
    assert not errors, errors
    assert scans[0] > 0
    store.close()


def test_read_modify_write_path_reads_and_writes_as_get_and_put(store, host):
    """The fused path of aggregations: same values as get and put, whether or not the store is cached,
    with other keys read in between, and visible to the store's own get at once and after a commit."""
    get, put = store.read_modify_write()
    for i in range(300):
        key = f"k{i % 7}"
        previous = get(key)
        assert previous == store.get(key)
        get(f"k{(i + 3) % 7}")  # another key read in between: the write still goes to ``key``
        put(key, (previous or 0) + 1)
        if i % 50 == 49:
            host.commit()
    counts = {f"k{i}": store.get(f"k{i}") for i in range(7)}
    assert counts == {f"k{i}": len(range(i, 300, 7)) for i in range(7)}
    assert store.metrics.get >= 600 and store.metrics.put >= 300


WRITES = st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d\xff", b"\x00"]),
                            st.one_of(st.none(), st.binary(max_size=3))), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(WRITES, min_size=1, max_size=4))
def test_rocksdb_write_batches_apply_as_the_in_memory_store_s(batches):
    """RocksDB writes a batch in key order (its memtable inserts sorted keys cheaply): a key written
    twice in one batch still ends with its last write, deletes included, as a plain loop of puts."""
    from strom.streams.state.memory import InMemoryKeyValueStore
    from strom.streams.state.rocksdb import RocksDBStore
    rocks, memory = RocksDBStore("batches"), InMemoryKeyValueStore("model")
    with tempfile.TemporaryDirectory() as state_dir:
        context = SimpleNamespace(state_dir=state_dir)
        rocks.init(context, rocks)
        memory.init(context, memory)
        try:
            for offset, writes in enumerate(batches):
                rocks.write_batch(iter(writes), offset)
                memory.write_batch(iter(writes), offset)
                assert list(rocks.all()) == list(memory.all())
                assert rocks.committed_offset == offset
        finally:
            rocks.close()


@pytest.mark.parametrize("kind", sorted(SUPPLIERS))
def test_read_modify_write_reads_below_a_cache_too_small_for_the_keys(make_host, kind):
    """The fused read of a cache miss goes through the transaction buffer to the store (RocksDB's
    read inlined too): counts of more keys than the cache holds, over commits, are exact."""
    host = make_host(kind, cache_bytes=2_000)
    builder = Stores.key_value_store_builder(SUPPLIERS[kind]("kv"), Serdes.String(), Serdes.Long())
    store = host.init(builder.with_caching_enabled().with_logging_disabled())
    get, put = store.read_modify_write()
    for i in range(3_000):
        key = f"k{i * 7 % 101}"
        put(key, (get(key) or 0) + 1)
        if i % 500 == 499:
            host.commit()
    assert {f"k{i}": store.get(f"k{i}") for i in range(101)} == \
        {f"k{i}": sum(1 for j in range(3_000) if j * 7 % 101 == i) for i in range(101)}
    store.close()
