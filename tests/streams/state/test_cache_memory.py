"""The record cache's real memory stays near ``statestore.cache.max.bytes``: entries are counted at what
they cost in Python (tracemalloc sees every object the cache keeps alive)."""

from __future__ import annotations

import gc
import tracemalloc

from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import RecordContext

BUDGET = 2 * 1024 * 1024


def fill(cache: ThreadCache, keys: int) -> None:
    """Count-like writes as a caching store makes them: a key, a 16-byte value and the record's context
    per record, every object made here, so the ones the cache keeps are traced."""
    named = cache.named_cache("0_0-counts")
    named.set_listener(lambda entries: None)
    for i in range(keys):
        context = RecordContext(1_700_000_000_000 + i, "input", 0, 10_000_000 + i)
        value = (1_700_000_000_000 + i).to_bytes(8, "big") + (i % 97).to_bytes(8, "big")
        named.put_dirty(b"key-%d" % (i * 7919 % 1_000_000), value, context)


def test_a_full_cache_uses_within_1_5x_of_its_budget():
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cache = ThreadCache(BUDGET)
        fill(cache, 20_000)  # ~4x what fits
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.size_bytes() <= BUDGET
    assert 0.5 * BUDGET < used < 1.5 * BUDGET, f"{used} bytes for a {BUDGET}-byte cache"
