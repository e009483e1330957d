"""The key-ordered concurrency core: per-key order, real concurrency, rebuild without loss."""

import asyncio
import random
import threading
import time
from collections import defaultdict

import pytest

from strom.tasks import AsyncRuntime, KeyOrderedExecutor, RateLimiter
from strom.tasks.properties import ProcessorProperties, Property


def _items(n_keys: int, per_key: int) -> list[tuple[str, int]]:
    items = [(f"k{k}", i) for i in range(per_key) for k in range(n_keys)]
    random.Random(7).shuffle(items)
    # shuffling must keep each key's sequence ascending: re-number per key in list order
    counters: dict[str, int] = defaultdict(int)
    renumbered = []
    for key, _ in items:
        renumbered.append((key, counters[key]))
        counters[key] += 1
    return renumbered


def test_per_key_order_under_random_delays_threads_concurrency_16() -> None:
    seen: dict[str, list[int]] = defaultdict(list)
    active, peak = [0], [0]
    lock = threading.Lock()
    rng = random.Random(1)

    def handle(item: tuple[str, int]) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(rng.random() * 0.004)
        with lock:
            active[0] -= 1
        seen[item[0]].append(item[1])

    executor = KeyOrderedExecutor(handle, 16)
    items = _items(64, 20)
    for key, seq in items:
        executor.submit(key, (key, seq))
    assert executor.wait_idle(30)
    executor.close()
    assert sum(len(v) for v in seen.values()) == len(items)
    for key, seqs in seen.items():
        assert seqs == sorted(seqs), key
    assert peak[0] > 8, "work ran concurrently"


def test_per_key_order_under_random_delays_asyncio_concurrency_16() -> None:
    runtime = AsyncRuntime()
    seen: dict[str, list[int]] = defaultdict(list)
    rng = random.Random(2)

    async def handle(item: tuple[str, int]) -> None:
        await asyncio.sleep(rng.random() * 0.004)
        seen[item[0]].append(item[1])

    executor = KeyOrderedExecutor(handle, 16, runtime=runtime)
    items = _items(64, 20)
    start = time.monotonic()
    for key, seq in items:
        executor.submit(key, (key, seq))
    assert executor.wait_idle(30)
    elapsed = time.monotonic() - start
    runtime.close()
    assert sum(len(v) for v in seen.values()) == len(items)
    for key, seqs in seen.items():
        assert seqs == sorted(seqs), key
    # 1280 sleeps of 2 ms on average: sequential would take ~2.5 s
    assert elapsed < 1.5


def test_null_keys_spread_round_robin() -> None:
    units: list[str] = []
    executor = KeyOrderedExecutor(lambda item: units.append(threading.current_thread().name), 4, name="rr")
    for i in range(40):
        executor.submit(None, i)
    assert executor.wait_idle(5)
    executor.close()
    assert len(set(units)) == 4


def test_close_discarding_drops_queued_items() -> None:
    gate = threading.Event()
    handled: list[int] = []

    def handle(i: int) -> None:
        gate.wait(5)
        handled.append(i)

    executor = KeyOrderedExecutor(handle, 1)
    for i in range(10):
        executor.submit("k", i)
    time.sleep(0.05)
    threading.Timer(0.05, gate.set).start()
    executor.close(discard_queued=True)
    assert handled == [0]
    assert executor.idle()


@pytest.mark.parametrize("rate", [200])
def test_rate_limiter_bounds_throughput_and_follows_changes(rate: int) -> None:
    prop = Property(ProcessorProperties.PROCESSING_RATE, rate)
    limiter = RateLimiter(prop)
    start = time.monotonic()
    for _ in range(60):
        limiter.acquire()
    elapsed = time.monotonic() - start
    assert 0.25 <= elapsed < 0.6  # 60 tokens at 200/s
    prop.set(-1)
    start = time.monotonic()
    for _ in range(10_000):
        limiter.acquire()
    assert time.monotonic() - start < 0.5
    prop.set(0)
    released = threading.Event()
    threading.Thread(target=lambda: (limiter.acquire(), released.set()), daemon=True).start()
    assert not released.wait(0.3)
    prop.set(1000)
    assert released.wait(1.0)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_submit_many_then_hand_back_returns_exactly_the_unstarted_items(asynchronous: bool) -> None:
    gate = threading.Event()
    handled: list[tuple[str, int]] = []
    if asynchronous:
        runtime: AsyncRuntime | None = AsyncRuntime()

        async def handle(item: tuple[str, int]) -> None:
            while not gate.is_set():
                await asyncio.sleep(0.001)
            handled.append(item)
    else:
        runtime = None

        def handle(item: tuple[str, int]) -> None:
            gate.wait(5)
            handled.append(item)

    executor = KeyOrderedExecutor(handle, 4, runtime=runtime, name="batch")
    items = _items(8, 10)
    executor.submit_many(items, key_of=lambda item: item[0])
    assert executor.backlog() == len(items)
    time.sleep(0.05)  # every unit with work is now blocked in its first item
    executor.hand_back()
    gate.set()
    assert executor.wait_idle(5)
    back = executor.handed_back()
    executor.close()
    if runtime is not None:
        runtime.close()
    assert sorted(handled + back) == sorted(items), "every item handled or handed back, none twice"
    assert 1 <= len(handled) <= 4, "each unit finished only the item it had started"
    for key in {k for k, _ in items}:
        assert [s for k, s in back if k == key] == sorted(s for k, s in back if k == key)
