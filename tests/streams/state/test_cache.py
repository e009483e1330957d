"""The record cache, traced against Kafka's ThreadCache, NamedCache and CachingKeyValueStore."""

from __future__ import annotations

import gc
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.errors import ConfigError
from strom.kafka.serdes import Serdes
from strom.streams.state.cache import LRUCacheEntry, ThreadCache, thread_cache_bytes
from strom.streams.state.context import RecordContext
from strom.streams.state.stores import Stores

PROPERTY_RUN = itertools.count()
CTX = RecordContext(timestamp=1, topic="t", partition=0, offset=0)


def entry(key: bytes, value: bytes | None, dirty: bool = True, ts: int = 1) -> LRUCacheEntry:
    return LRUCacheEntry(key, value, dirty, RecordContext(ts, "t", 0, ts))


class Recorder:
    def __init__(self):
        self.flushes: list[list[tuple[bytes, bytes | None]]] = []

    def __call__(self, entries):
        self.flushes.append([(e.key, e.value) for e in entries])


def cache_with(namespaces, max_bytes):
    cache = ThreadCache(max_bytes)
    recorders = {}
    for ns in namespaces:
        recorders[ns] = Recorder()
        cache.add_dirty_entry_flush_listener(ns, recorders[ns])
    return cache, recorders


def test_entry_size_counts_key_value_and_overhead():
    small = entry(b"k", b"v")
    assert small.size == entry(b"k", None).size + 1
    assert entry(b"key", b"value").size == small.size + 2 + 4
    cache, _ = cache_with(["a"], 10_000)
    cache.put("a", b"k", small)
    cache.put("a", b"k", entry(b"k", b"vvvv"))
    assert cache.size_bytes() == entry(b"k", b"vvvv").size


def test_dirty_keys_keep_arrival_order_of_latest_write():
    cache, _ = cache_with(["a"], 10_000)
    for key in [b"x", b"y", b"z", b"x"]:
        cache.put("a", key, entry(key, b"1"))
    assert cache.named_cache("a").dirty_keys() == [b"y", b"z", b"x"]


def test_flush_hands_all_dirty_entries_in_arrival_order_then_keeps_them_clean():
    cache, rec = cache_with(["a"], 10_000)
    for key in [b"b", b"a", b"c", b"b"]:
        cache.put("a", key, entry(key, key.upper()))
    cache.flush("a")
    assert rec["a"].flushes == [[(b"a", b"A"), (b"c", b"C"), (b"b", b"B")]]
    assert cache.named_cache("a").dirty_keys() == []
    assert cache.get("a", b"b").value == b"B"
    assert not cache.get("a", b"b").dirty
    cache.flush("a")
    assert len(rec["a"].flushes) == 1, "a flush with no dirty entries calls no listener"


def test_a_flush_keeps_no_object_per_entry_alive_while_its_listener_runs():
    """At many keys every eviction of a dirty entry flushes the whole cache: entries made up front for
    the listener would outlive collections of the young generation and make full collections frequent.
    The listener gets each entry as it iterates, the same ones ``fields`` gives as plain tuples."""
    cache = ThreadCache(10_000_000)
    named = cache.named_cache("a")
    tracked: list[int] = []
    got = []

    def listener(entries):
        tracked.append(len(gc.get_objects()))
        got.extend((e.key, e.value, e.context) for e in entries)
        assert list(entries.fields()) == got and len(entries) == len(got)

    named.set_listener(listener)
    contexts = [RecordContext(i, "t", 0, i) for i in range(5_000)]
    for i, context in enumerate(contexts):
        named.put_dirty(b"k%d" % i, b"v%d" % i, context)
    gc.disable()
    try:
        before = len(gc.get_objects())
        named.flush()
    finally:
        gc.enable()
    assert tracked[0] - before < 100, f"{tracked[0] - before} objects made for a flush of 5000 entries"
    assert got == [(b"k%d" % i, b"v%d" % i, contexts[i]) for i in range(5_000)]


def test_flushed_tombstones_leave_the_cache():
    cache, rec = cache_with(["a"], 10_000)
    cache.put("a", b"k", entry(b"k", b"v"))
    cache.put("a", b"d", entry(b"d", None))
    cache.flush("a")
    assert rec["a"].flushes == [[(b"k", b"v"), (b"d", None)]]
    assert cache.get("a", b"d") is None
    assert cache.get("a", b"k").value == b"v"


def test_over_budget_evicts_lru_and_a_dirty_eviction_flushes_every_dirty_entry():
    size = entry(b"k1", b"v1").size
    cache, rec = cache_with(["a"], 3 * size)
    for i in (1, 2, 3):
        cache.put("a", b"k%d" % i, entry(b"k%d" % i, b"v%d" % i))
    assert rec["a"].flushes == []
    cache.put("a", b"k4", entry(b"k4", b"v4"))
    # k1 is the eldest: evicted, and it drags all other dirty entries (arrival order) with it
    assert rec["a"].flushes == [[(b"k1", b"v1"), (b"k2", b"v2"), (b"k3", b"v3"), (b"k4", b"v4")]]
    assert cache.get("a", b"k1") is None
    assert [cache.get("a", b"k%d" % i).dirty for i in (2, 3, 4)] == [False] * 3
    assert cache.size_bytes() <= 3 * size


def test_get_refreshes_lru_order_and_clean_evictions_flush_nothing():
    size = entry(b"k1", b"v1").size
    cache, rec = cache_with(["a"], 2 * size)
    cache.put("a", b"k1", entry(b"k1", b"v1", dirty=False))
    cache.put("a", b"k2", entry(b"k2", b"v2", dirty=False))
    cache.get("a", b"k1")
    cache.put("a", b"k3", entry(b"k3", b"v3", dirty=False))
    assert cache.get("a", b"k2") is None, "k2 was least recently used"
    assert cache.get("a", b"k1") is not None
    assert rec["a"].flushes == []


def test_budget_is_shared_but_a_put_evicts_only_from_its_own_cache():
    size = entry(b"k1", b"v1").size
    cache, rec = cache_with(["0_0-a", "0_0-b"], 2 * size)
    cache.put("0_0-a", b"k1", entry(b"k1", b"v1"))
    cache.put("0_0-a", b"k2", entry(b"k2", b"v2"))
    cache.put("0_0-b", b"k3", entry(b"k3", b"v3"))
    # b's own entry is evicted (flushed): a's entries stay although they fill the budget
    assert rec["0_0-b"].flushes == [[(b"k3", b"v3")]]
    assert rec["0_0-a"].flushes == []
    assert cache.named_cache("0_0-b").size_bytes == 0
    cache.put("0_0-a", b"k4", entry(b"k4", b"v4"))
    assert rec["0_0-a"].flushes == [[(b"k1", b"v1"), (b"k2", b"v2"), (b"k4", b"v4")]]


def test_zero_budget_flushes_every_put_immediately():
    cache, rec = cache_with(["a"], 0)
    cache.put("a", b"k", entry(b"k", b"1"))
    cache.put("a", b"k", entry(b"k", b"2"))
    assert rec["a"].flushes == [[(b"k", b"1")], [(b"k", b"2")]]
    assert cache.size_bytes() == 0


def test_budget_split_among_threads_and_resize():
    assert thread_cache_bytes(10 * 1024 * 1024, 4) == 2621440
    with pytest.raises(ConfigError, match=r"statestore\.cache\.max\.bytes"):
        thread_cache_bytes(-1, 1)
    with pytest.raises(ConfigError, match=r"num\.stream\.threads"):
        thread_cache_bytes(100, 0)
    size = entry(b"k1", b"v1").size
    cache, rec = cache_with(["a", "b"], 10 * size)
    for ns in ("a", "b"):
        for i in range(3):
            cache.put(ns, b"k%d" % i, entry(b"k%d" % i, b"v%d" % i))
    cache.resize(2 * size)
    assert cache.size_bytes() <= 2 * size
    assert rec["a"].flushes and rec["b"].flushes


def test_clear_drops_entries_without_flushing():
    cache, rec = cache_with(["a"], 10_000)
    cache.put("a", b"k", entry(b"k", b"v"))
    cache.clear("a")
    cache.flush("a")
    assert rec["a"].flushes == [] and cache.size_bytes() == 0


# --- the caching store on the cache: what downstream sees --------------------------------------

class Forwarded(list):
    def __call__(self, key, new, old, timestamp):
        self.append((key, new, old, timestamp))


def cached_store(host, name="counts", send_old_values=False, timestamped=False):
    if timestamped:
        supplier = Stores.persistent_timestamped_key_value_store(name)
        builder = Stores.timestamped_key_value_store_builder(supplier, Serdes.String(), Serdes.Long())
    else:
        builder = Stores.key_value_store_builder(Stores.in_memory_key_value_store(name),
                                                 Serdes.String(), Serdes.Long())
    store = host.init(builder.with_caching_enabled())
    forwarded = Forwarded()
    assert store.set_flush_listener(forwarded, send_old_values) is True
    return store, forwarded


def test_caching_store_compacts_updates_until_commit(host):
    store, forwarded = cached_store(host)
    for ts, (key, value) in enumerate([("a", 1), ("b", 1), ("a", 2), ("a", 3)], start=100):
        host.at(ts, offset=ts)
        store.put(key, value)
    assert forwarded == [] and host.changelogs == {}
    assert store.get("a") == 3
    host.commit()
    assert forwarded == [("b", 1, None, 101), ("a", 3, None, 103)]
    assert [(r.key, r.value, r.timestamp) for r in host.changelogs["counts"]] == [
        (b"b", b"\x00" * 7 + b"\x01", 101), (b"a", b"\x00" * 7 + b"\x03", 103)]


def test_send_old_values_gives_the_stored_value_as_old(host):
    store, forwarded = cached_store(host, send_old_values=True)
    store.put("a", 1)
    host.commit()
    store.put("a", 2)
    store.put("a", 5)
    store.delete("b")
    host.commit()
    assert forwarded == [("a", 1, None, 0), ("a", 5, 1, 0)], "deleting an absent key forwards nothing"
    store.delete("a")
    host.commit()
    assert forwarded[-1] == ("a", None, 5, 0)
    assert store.get("a") is None


def test_flush_forwards_with_the_entry_record_context(host):
    store, _ = cached_store(host)
    seen = []
    store.set_flush_listener(lambda k, n, o, ts: seen.append((k, host.record_context.offset)), False)
    host.at(10, offset=7)
    store.put("a", 1)
    host.at(20, offset=8)
    store.put("b", 1)
    host.at(30, offset=9)
    host.manager.flush()
    assert seen == [("a", 7), ("b", 8)]
    assert host.record_context.offset == 9, "the processing context is restored after the flush"


def test_eviction_in_a_small_cache_forwards_early_but_same_final_state(make_host):
    def run(cache_bytes):
        host = make_host(str(cache_bytes), cache_bytes=cache_bytes)
        store, forwarded = cached_store(host)
        for i in range(200):
            key = f"k{i % 17}"
            store.put(key, (store.get(key) or 0) + i)
        host.commit()
        last = {k: v for k, v, _, _ in forwarded}
        return dict(store.all()), last, len(forwarded)

    small, large = run(300), run(10_000_000)
    assert small[0] == large[0] == small[1] == large[1]
    assert large[2] == 17 < small[2]


def test_timestamped_cached_store_forwards_plain_values_with_their_timestamps(host):
    store, forwarded = cached_store(host, timestamped=True, send_old_values=True)
    from strom.streams.state.timestamped import ValueAndTimestamp
    store.put("a", ValueAndTimestamp.make(4, 55))
    host.commit()
    store.put("a", ValueAndTimestamp.make(6, 66))
    host.commit()
    assert forwarded == [("a", 4, None, 55), ("a", 6, 4, 66)]
    assert store.get("a") == ValueAndTimestamp(6, 66)
    record = host.changelogs["counts"][-1]
    assert (record.value, record.timestamp) == (Serdes.Long().serialize("t", 6), 66)
    store.close()


def test_store_without_cache_reports_no_flush_listener(host):
    store = host.init(Stores.key_value_store_builder(Stores.in_memory_key_value_store("plain"),
                                                     Serdes.String(), Serdes.Long()))
    assert store.set_flush_listener(Forwarded(), False) is False
    store.put("a", 1)
    assert host.changelogs["plain"][0].key == b"a", "without a cache every write is logged at once"


def test_deleting_a_key_that_never_existed_writes_and_forwards_nothing(host):
    store, forwarded = cached_store(host)
    store.put("a", 1)
    store.delete("a")
    store.delete("never")
    host.commit()
    assert forwarded == [] and host.changelogs == {}
    assert list(store.all()) == []


CACHE_OPS = st.lists(st.tuples(st.sampled_from(["put", "put", "put", "delete", "commit"]),
                               st.integers(0, 12), st.integers(0, 100)), max_size=80)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=CACHE_OPS, cache_bytes=st.sampled_from([0, 150, 400, 2_000, 10**7]))
def test_any_cache_size_gives_the_same_store_and_last_forwarded_values(make_host, ops, cache_bytes):
    host = make_host(f"prop{next(PROPERTY_RUN)}", cache_bytes=cache_bytes)
    store, forwarded = cached_store(host, send_old_values=True)
    expected: dict[str, int] = {}
    for i, (op, key, value) in enumerate(ops):
        host.at(i, offset=i)
        if op == "put":
            store.put(f"k{key}", value)
            expected[f"k{key}"] = value
        elif op == "delete":
            store.delete(f"k{key}")
            expected.pop(f"k{key}", None)
        else:
            host.commit()
    host.commit()
    assert dict(store.all()) == expected
    last = {}
    for key, new, _old, _ts in forwarded:
        last[key] = new
    assert {k: v for k, v in last.items() if v is not None} == expected
    assert len(forwarded) <= sum(op != "commit" for op, _, _ in ops)
    # every forwarded Change's old value is the previous forwarded new value of that key
    previous: dict[str, int | None] = {}
    for key, new, old, _ts in forwarded:
        assert old == previous.get(key)
        previous[key] = new
    store.close()


def test_put_dirty_updates_in_place_with_the_same_accounting_as_put():
    cache, rec = cache_with(["a"], 10_000)
    cache.put("a", b"k1", entry(b"k1", b"v", dirty=False))
    cache.put_dirty("a", b"k2", b"xx", CTX)
    cache.put_dirty("a", b"k1", b"longer", CTX)
    assert cache.size_bytes() == entry(b"k1", b"longer").size + entry(b"k2", b"xx").size
    assert cache.named_cache("a").dirty_keys() == [b"k2", b"k1"]
    cache.put_dirty("a", b"k2", None, CTX)
    cache.flush("a")
    assert rec["a"].flushes == [[(b"k1", b"longer"), (b"k2", None)]]
    assert cache.size_bytes() == entry(b"k1", b"longer").size


def test_evicted_entries_keep_their_values_for_a_snapshot_that_holds_them():
    """put_dirty makes a new entry object per new key: an entry it evicts may still be held by a scan's
    snapshot (or any reader), which keeps seeing the value it took. (Evicted entries are not
    reused: whether nothing else holds one cannot be told reliably across Python versions, as
    sys.getrefcount counts borrowed references differently from 3.14 on.)"""
    size = entry(b"k1", b"v1").size
    cache, _ = cache_with(["a"], 2 * size)
    named = cache.named_cache("a")
    cache.put("a", b"k1", entry(b"k1", b"v1", dirty=False))
    cache.put("a", b"k2", entry(b"k2", b"v2", dirty=False))
    snapshot = named.sorted_items(None, None)
    held = snapshot[0][1]
    cache.put_dirty("a", b"k3", b"v3", CTX)  # evicts k1, which the snapshot holds
    cache.put_dirty("a", b"k4", b"v4", CTX)  # evicts k2 (held too): both entries are new objects
    assert [(key, e.value) for key, e in snapshot] == [(b"k1", b"v1"), (b"k2", b"v2")]
    assert named.entries[b"k4"] is not held and named.entries[b"k3"] is not held
    del snapshot, held
    cache.flush("a")
    free = named.entries[b"k3"]
    cache.put_dirty("a", b"k5", b"v5", CTX)  # evicts k3 (clean, held by `free` here)
    assert named.entries[b"k5"] is not free and free.value == b"v3"
    del free
    cache.put_dirty("a", b"k6", b"v6", CTX)  # evicts k4 (clean, held by nothing)
    assert [(key, e.value, e.dirty) for key, e in named.entries.items()] == [
        (b"k5", b"v5", True), (b"k6", b"v6", True)]
    assert cache.size_bytes() == entry(b"k5", b"v5").size + entry(b"k6", b"v6").size
