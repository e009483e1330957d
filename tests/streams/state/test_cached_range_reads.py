"""Property: a cached window or session store reads exactly what the same store without a cache reads.

The cached layers answer range reads from the cache's sorted keys, bounded by the key range; keys that
are prefixes of one another (b"a", b"a\\x00", b"ab") interleave in the binary store-key order, so they
are what these tests feed, with small caches (evictions flush early). With a short retention segments
expire; a cache holds writes back from the store below, and with them the stream time that expires
records, so those runs compare after a final commit.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.kafka.serdes import Serdes
from strom.streams.kstream.windows import SessionWindow, Windowed
from strom.streams.state.window import builders

from .store_host import StoreHost

KEYS = [b"", b"\x00", b"a", b"a\x00", b"a\x00\x00", b"a\x01", b"ab", b"b", b"\xff"]
keys = st.sampled_from(KEYS)
bounds = st.one_of(st.none(), keys)
times = st.integers(0, 3_000)
writes = st.lists(st.one_of(
    st.tuples(st.just("put"), keys, times, st.one_of(st.none(), st.integers(0, 9))),
    st.tuples(st.just("commit"), st.just(b""), st.just(0), st.just(None)),
), min_size=1, max_size=60)
queries = st.lists(st.tuples(bounds, bounds, times, times), min_size=1, max_size=8)


def _pair(tmp_path, make_builder, persistent_cache_bytes):
    """The same store built twice, with and without a cache, each in its own task context."""
    stores = []
    for cached in (True, False):
        builder = make_builder()
        if cached:
            builder.with_caching_enabled()
        host = StoreHost(tmp_path / ("cached" if cached else "plain"), persistent_cache_bytes)
        stores.append((host.init(builder), host))
    return stores


def _apply(stores, operations, write, retention):
    if retention < 3_000:  # records expire: compare once stream time reached both stores
        operations = [*operations, ("commit", b"", 0, None)]
    for index, (operation, key, time, value) in enumerate(operations):
        for store, context in stores:
            context.at(time)
            if operation == "commit":
                context.commit()
            else:
                write(store, key, time, value, index)


def _within(key, key_from, key_to):
    return (key_from is None or key >= key_from) and (key_to is None or key <= key_to)


def _close(stores):
    for store, _ in stores:
        store.close()


def histories(test):
    """Runs ``test`` on random write histories and reads: both store kinds, two cache sizes and retentions."""
    return settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])(
        given(operations=writes, reads=queries, persistent=st.booleans(),
              cache_bytes=st.sampled_from([300, 10_000]), retention=st.sampled_from([1_500, 10_000]))(test))


@histories
def test_cached_window_store_reads_equal_uncached_reads(tmp_path_factory, operations, reads, persistent,
                                                         cache_bytes, retention):
    def make_builder():
        supplier = builders.WindowBytesStoreSupplier("w", retention, 100, False, persistent, False, 500)
        return builders.window_store_builder(supplier, Serdes.ByteArray(), Serdes.Long())

    def write(store, key, time, value, _index):
        store.put(key, value, time)

    stores = _pair(tmp_path_factory.mktemp("w"), make_builder, cache_bytes)
    try:
        _apply(stores, operations, write, retention)
        (cached, _), (plain, _) = stores
        everything = list(plain.all())
        for key_from, key_to, time_from, time_to in reads:
            expected = [(w, v) for w, v in everything if _within(w.key, key_from, key_to)
                        and time_from <= w.window.start <= time_to]
            assert list(plain.fetch_key_range(key_from, key_to, time_from, time_to)) == expected
            assert list(cached.fetch_key_range(key_from, key_to, time_from, time_to)) == expected
            assert list(cached.backward_fetch_key_range(key_from, key_to, time_from, time_to)) == \
                list(plain.backward_fetch_key_range(key_from, key_to, time_from, time_to))
            key = key_from or b""
            assert list(cached.fetch_range(key, time_from, time_to)) == list(plain.fetch_range(key, time_from,
                                                                                               time_to))
            assert cached.fetch(key, time_from) == plain.fetch(key, time_from)
        assert list(cached.all()) == list(plain.all())
        assert list(cached.backward_all()) == list(plain.backward_all())
    finally:
        _close(stores)


@histories
def test_cached_session_store_reads_equal_uncached_reads(tmp_path_factory, operations, reads, persistent,
                                                          cache_bytes, retention):
    def make_builder():
        supplier = builders.SessionBytesStoreSupplier("s", retention, persistent, 500)
        return builders.session_store_builder(supplier, Serdes.ByteArray(), Serdes.Long())

    def write(store, key, time, value, index):
        # sessions of different lengths; a None value removes the session
        store.put(Windowed(key, SessionWindow(time, time + index % 3 * 50)), value)

    stores = _pair(tmp_path_factory.mktemp("s"), make_builder, cache_bytes)
    try:
        _apply(stores, operations, write, retention)
        (cached, _), (plain, _) = stores
        everything = list(plain.find_sessions_key_range(None, None, 0, 10**6))
        for key_from, key_to, earliest_end, latest_start in reads:
            expected = [(w, v) for w, v in everything if _within(w.key, key_from, key_to)
                        and w.window.end >= earliest_end and w.window.start <= latest_start]
            for store in (plain, cached):
                assert list(store.find_sessions_key_range(key_from, key_to, earliest_end, latest_start)) == \
                    expected
            key = key_from or b""
            assert list(cached.find_sessions(key, earliest_end, latest_start)) == \
                list(plain.find_sessions(key, earliest_end, latest_start))
            assert list(cached.backward_fetch(key)) == list(plain.backward_fetch(key))
        assert list(cached.find_sessions_key_range(None, None, 0, 10**6)) == \
            list(plain.find_sessions_key_range(None, None, 0, 10**6))
    finally:
        _close(stores)
