"""ConcurrentProcessor inside a topology: per-key output order, all finished before commit."""

import asyncio
import random
import threading
import time
from collections import defaultdict

import pytest

from strom.errors import ProcessingError
from strom.kafka.serdes import IntegerSerde, StringSerde
from strom.streams.kstream.internals.concurrent import map_values_supplier, process_supplier
from strom.streams.processor.api import Record
from strom.streams.processor.topology import Topology
from strom.streams.test_driver import TopologyTestDriver


def _driver(supplier) -> tuple[TopologyTestDriver, object, object]:
    topology = (Topology()
                .add_source("in", "input", key_serde=StringSerde(), value_serde=IntegerSerde())
                .add_processor("concurrent", supplier, "in")
                .add_sink("out", "output", "concurrent", key_serde=StringSerde(), value_serde=IntegerSerde()))
    driver = TopologyTestDriver(topology, {"commit.interval.ms": 60_000}, commit_per_record=False)
    return (driver, driver.create_input_topic("input", StringSerde(), IntegerSerde()),
            driver.create_output_topic("output", StringSerde(), IntegerSerde()))


def _check_per_key_order(pairs: list[tuple[str, int]], expected: int) -> None:
    per_key: dict[str, list[int]] = defaultdict(list)
    for key, value in pairs:
        per_key[key].append(value)
    assert sum(len(v) for v in per_key.values()) == expected
    for key, values in per_key.items():
        assert values == sorted(values), key


def test_map_values_concurrently_keeps_per_key_order_and_finishes_before_commit() -> None:
    rng = random.Random(3)
    threads: set[str] = set()

    def slow_double(value: int) -> int:
        threads.add(threading.current_thread().name)
        time.sleep(rng.random() * 0.003)
        return value * 2

    driver, inp, out = _driver(map_values_supplier(slow_double, 16))
    with driver:
        for i in range(400):
            inp.pipe_input(f"k{i % 23}", i)
        driver.commit()
        assert driver.tasks[0].buffered == 0
        pairs = [(r.key, r.value) for r in out.read_records_to_list()]
    _check_per_key_order(pairs, 400)
    assert sorted(v for _, v in pairs) == [2 * i for i in range(400)]
    assert len(threads) > 4


def test_async_map_values_concurrently() -> None:
    async def slow_inc(value: int) -> int:
        await asyncio.sleep(random.random() * 0.003)
        return value + 1

    driver, inp, out = _driver(map_values_supplier(slow_inc, 32))
    with driver:
        start = time.monotonic()
        for i in range(600):
            inp.pipe_input(f"k{i % 50}", i)
        driver.commit()
        elapsed = time.monotonic() - start
        pairs = [(r.key, r.value) for r in out.read_records_to_list()]
    _check_per_key_order(pairs, 600)
    assert elapsed < 0.9 * 1.5  # sequential: ~0.9 s of sleeps


def test_process_concurrently_may_emit_several_records_or_none() -> None:
    def explode(record: Record) -> list[Record]:
        return [record.with_value(record.value * 10 + j) for j in range(record.value % 3)]

    driver, inp, out = _driver(process_supplier(explode, 4))
    with driver:
        for i in range(30):
            inp.pipe_input("k", i)
        driver.commit()
        values = [r.value for r in out.read_records_to_list()]
    assert values == [i * 10 + j for i in range(30) for j in range(i % 3)]


def test_an_error_in_the_function_fails_processing_with_the_key() -> None:
    def boom(value: int) -> int:
        raise ValueError("bad value")

    driver, inp, _ = _driver(map_values_supplier(boom, 2))
    with driver, pytest.raises(ProcessingError, match="key 'x'"):
        inp.pipe_input("x", 1)
        driver.commit()
