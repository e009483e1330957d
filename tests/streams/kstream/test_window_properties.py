"""Property: a windowed count equals a direct count of the records each window holds, with records
arriving after their window closed (end + grace <= max timestamp seen before them) left out."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.kafka.serdes import Serdes
from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.options import Consumed, Materialized
from strom.streams.kstream.windows import TimeWindows
from strom.streams.state.window import builders
from strom.streams.test_driver import TopologyTestDriver

PROPS = {"application.id": "window-props", "default.key.serde": "String", "default.value.serde": "String"}

records = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 200)), min_size=1, max_size=40)


def expected_counts(rows, size, advance, grace):
    counts: dict[tuple[str, int], int] = {}
    stream_time = -1
    for key, timestamp in rows:
        stream_time = max(stream_time, timestamp)
        start = max(0, timestamp - size + advance) // advance * advance
        while start <= timestamp:
            if start + size > stream_time - grace:
                counts[(key, start)] = counts.get((key, start), 0) + 1
            start += advance
    return counts


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=records, size=st.integers(1, 40), advance_fraction=st.integers(1, 4), grace=st.integers(0, 30),
       caching=st.booleans(), cache_bytes=st.sampled_from([0, 400, 10_000_000]))
def test_windowed_count_matches_direct_count(rows, size, advance_fraction, grace, caching, cache_bytes):
    advance = max(1, size // advance_fraction)
    windows = TimeWindows.of_size_and_grace(size, grace).advance_by(advance)
    supplier = builders.in_memory_timestamped_window_store("counts", 10_000, size)
    materialized = Materialized.as_(supplier)
    if not caching:
        materialized = materialized.with_caching_disabled()
    builder = StreamsBuilder()
    (builder.stream("input", Consumed.with_(Serdes.String(), Serdes.String())).group_by_key()
     .windowed_by(windows).count(materialized=materialized))
    props = PROPS | {"statestore.cache.max.bytes": cache_bytes}  # small caches evict and flush early
    with TopologyTestDriver(builder.build(), props, commit_per_record=False) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        for key, timestamp in rows:
            topic.pipe_input(key, "v", timestamp)
        driver.commit()
        actual = {(w.key, w.window.start): count for w, count in driver.get_window_store("counts").all()}
    assert actual == expected_counts(rows, size, advance, grace)


def expected_sessions(rows, gap):
    sessions = {}
    for key in {k for k, _ in rows}:
        times = sorted(t for k, t in rows if k == key)
        start = previous = times[0]
        count = 0
        for timestamp in times:
            if timestamp - previous > gap:
                sessions[(key, start, previous)] = count
                start, count = timestamp, 0
            previous = timestamp
            count += 1
        sessions[(key, start, previous)] = count
    return sessions


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=records, gap=st.integers(1, 30), caching=st.booleans())
def test_session_count_matches_clusters_of_records_within_the_gap(rows, gap, caching):
    from strom.streams.kstream.windows import SessionWindows

    materialized = Materialized.as_(builders.in_memory_session_store("sessions", 100_000))
    if not caching:
        materialized = materialized.with_caching_disabled()
    builder = StreamsBuilder()
    (builder.stream("input", Consumed.with_(Serdes.String(), Serdes.String())).group_by_key()
     .windowed_by(SessionWindows.of_inactivity_gap_and_grace(gap, 100_000)).count(materialized=materialized))
    with TopologyTestDriver(builder.build(), PROPS) as driver:
        topic = driver.create_input_topic("input", Serdes.String(), Serdes.String())
        for key, timestamp in rows:
            topic.pipe_input(key, "v", timestamp)
        store = driver.get_session_store("sessions")
        actual = {(w.key, w.window.start, w.window.end): count
                  for w, count in store.find_sessions_key_range(None, None, 0, 10**6)}
    assert actual == expected_sessions(rows, gap)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.sampled_from(["left", "right"]), st.sampled_from("ab"),
                               st.integers(0, 100)), max_size=30),
       before=st.integers(0, 20), after=st.integers(0, 20))
def test_inner_stream_stream_join_emits_each_pair_within_the_window_once(rows, before, after):
    from strom.streams.kstream.windows import JoinWindows

    builder = StreamsBuilder()
    windows = JoinWindows.of_time_difference_and_grace(0, 10_000).before(before).after(after)
    builder.stream("left").join(builder.stream("right"), lambda left, right: f"{left}+{right}",
                                windows).to("output")
    with TopologyTestDriver(builder.build(), PROPS) as driver:
        topics = {side: driver.create_input_topic(side, Serdes.String(), Serdes.String())
                  for side in ("left", "right")}
        for index, (side, key, timestamp) in enumerate(rows):
            topics[side].pipe_input(key, f"{side[0]}{index}", timestamp)
        output = driver.create_output_topic("output", Serdes.String(), Serdes.String())
        actual = sorted(output.read_key_values_to_list())
    expected = sorted((lk, f"l{i}+r{j}") for i, (ls, lk, lt) in enumerate(rows) if ls == "left"
                      for j, (rs, rk, rt) in enumerate(rows)
                      if rs == "right" and rk == lk and lt - before <= rt <= lt + after)
    assert actual == expected
