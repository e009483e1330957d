"""KStream.map_values_concurrently / process_concurrently through the DSL and the TopologyTestDriver."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict

from strom.kafka.serdes import IntegerSerde, LongSerde, StringSerde
from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.options import Consumed, Produced
from strom.streams.processor.api import Record
from strom.streams.test_driver import TopologyTestDriver

S, INT, L = StringSerde(), IntegerSerde(), LongSerde()


def _driver(builder: StreamsBuilder) -> TopologyTestDriver:
    return TopologyTestDriver(builder.build(), {"commit.interval.ms": 60_000}, commit_per_record=False)


def test_map_values_concurrently_then_count_sees_every_record_at_commit() -> None:
    rng = random.Random(9)

    def slow_enrich(value: int) -> int:
        time.sleep(rng.random() * 0.002)
        return value * 10

    builder = StreamsBuilder()
    orders = builder.stream("orders", Consumed.with_(S, INT))
    enriched = orders.map_values_concurrently(slow_enrich, concurrency=8)
    enriched.to("enriched", Produced.with_(S, INT))
    enriched.group_by_key().count().to_stream().to("counts", Produced.with_(S, L))
    with _driver(builder) as driver:
        orders = driver.create_input_topic("orders", S, INT)
        for i in range(300):
            orders.pipe_input(f"c{i % 13}", i)
        driver.commit()
        out = driver.create_output_topic("enriched", S, INT).read_records_to_list()
        counts = driver.create_output_topic("counts", S, L).read_key_values_to_map()
    per_key: dict[str, list[int]] = defaultdict(list)
    for record in out:
        per_key[record.key].append(record.value)
    assert sum(len(v) for v in per_key.values()) == 300
    assert all(values == sorted(values) for values in per_key.values())
    assert counts == {f"c{k}": len(range(k, 300, 13)) for k in range(13)}


def test_process_concurrently_with_an_async_function() -> None:
    async def lookup(record: Record) -> Record:
        await asyncio.sleep(0.001)
        return record.with_value(record.value + 1)

    builder = StreamsBuilder()
    (builder.stream("in", Consumed.with_(S, INT))
     .process_concurrently(lookup, concurrency=16)
     .to("out", Produced.with_(S, INT)))
    with _driver(builder) as driver:
        source = driver.create_input_topic("in", S, INT)
        for i in range(200):
            source.pipe_input(f"k{i % 7}", i)
        driver.commit()
        values = [(r.key, r.value) for r in driver.create_output_topic("out", S, INT).read_records_to_list()]
    assert sorted(v for _, v in values) == list(range(1, 201))
    for key in {k for k, _ in values}:
        seq = [v for k, v in values if k == key]
        assert seq == sorted(seq)
