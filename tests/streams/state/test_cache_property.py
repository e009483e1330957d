"""The record cache never changes results, only how many intermediate updates are emitted:
for any cache size and commit interval the final store and the last value per key are the same, and a
cache emits at most as many updates as no cache, and a cache holding everything at most as many as any."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.kafka.serdes import Serdes
from strom.streams import Materialized, Produced, Stores, StreamsBuilder, TopologyTestDriver

S, L = Serdes.String(), Serdes.Long()
HUGE = 1 << 30


def run(keys: list[str], cache_bytes: int, commit_interval_ms: int, tmp_dir: str) -> tuple[dict, list]:
    builder = StreamsBuilder()
    (
        builder.stream("in")
        .group_by_key()
        .count(materialized=Materialized.as_(Stores.in_memory_key_value_store("counts")))
        .to_stream()
        .to("out", Produced.with_(S, L))
    )
    props = {
        "application.id": "prop",
        "state.dir": tmp_dir,
        "default.key.serde": "String",
        "default.value.serde": "String",
        "statestore.cache.max.bytes": cache_bytes,
        "commit.interval.ms": commit_interval_ms,
    }
    with TopologyTestDriver(builder.build(), props, commit_per_record=False) as driver:
        source = driver.create_input_topic("in", S, S)
        for i, key in enumerate(keys):
            source.pipe_input(key, "v", timestamp=i)
            driver.advance_wall_clock_time(1)
        driver.commit()
        store = dict(driver.get_key_value_store("counts").all())
        emitted = driver.create_output_topic("out", S, L).read_key_values_to_list()
    return store, emitted


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=60),
    cache_bytes=st.integers(min_value=0, max_value=4096),
    commit_interval_ms=st.integers(min_value=1, max_value=100),
)
def test_cache_size_changes_only_the_number_of_updates(tmp_path, keys, cache_bytes, commit_interval_ms):
    expected = dict(Counter(keys))
    results = {
        size: run(keys, size, commit_interval_ms, str(tmp_path / str(size)))
        for size in (0, cache_bytes, HUGE)
    }
    for store, emitted in results.values():
        assert store == expected
        assert dict(emitted) == expected  # the last value emitted per key is the final count
    updates = {size: len(emitted) for size, (_, emitted) in results.items()}
    assert updates[0] == len(keys)  # no cache: every update is forwarded at once
    assert updates[HUGE] <= updates[cache_bytes] <= updates[0]
    if commit_interval_ms >= len(
        keys
    ):  # one commit at the end: a cache holding everything emits once per key
        assert updates[HUGE] == len(expected)
