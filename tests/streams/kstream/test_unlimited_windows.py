"""UnlimitedWindows as Kafka's: one window per key from its start on, ending at the largest timestamp,
never closed; records before the start fall in no window."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from strom.kafka.serdes import Serdes
from strom.streams import (
    Consumed,
    Materialized,
    Produced,
    StreamsBuilder,
    TopologyTestDriver,
    UnlimitedWindows,
)
from strom.streams.kstream.windows import MAX_TIMESTAMP, Window, WindowSpecError

S, L = Serdes.String(), Serdes.Long()


def _counts(windows: UnlimitedWindows, props: dict) -> list:
    builder = StreamsBuilder()
    (builder.stream("in", Consumed.with_(S, S)).group_by_key().windowed_by(windows)
     .count(Materialized.as_("counts").with_caching_disabled())
     .to_stream().map(lambda wk, n: (f"{wk.key}@{wk.window.start}-{wk.window.end}", n))
     .to("out", Produced.with_(S, L)))
    with TopologyTestDriver(builder.build(), props) as driver:
        source = driver.create_input_topic("in", S, S)
        for key, timestamp in [("a", 5), ("a", 1_000_000_000_000), ("b", 50), ("a", 20)]:
            source.pipe_input(key, "v", timestamp)
        out = driver.create_output_topic("out", S, L).read_key_values_to_list()
        fetched = list(driver.get_window_store("counts").fetch_range("a", 0, MAX_TIMESTAMP))
    return out, fetched


def test_one_never_ending_window_per_key_from_zero(props):
    out, fetched = _counts(UnlimitedWindows.of(), props)
    end = MAX_TIMESTAMP
    assert out == [(f"a@0-{end}", 1), (f"a@0-{end}", 2), (f"b@0-{end}", 1), (f"a@0-{end}", 3)]
    assert [start for start, _ in fetched] == [0]  # a late record (20 after 10^12) still counts


def test_start_on_leaves_earlier_records_out(props):
    out, _ = _counts(UnlimitedWindows.start_on(datetime(1970, 1, 1, 0, 0, 0, 20_000, tzinfo=UTC)), props)
    assert out == [(f"a@20-{MAX_TIMESTAMP}", 1), (f"b@20-{MAX_TIMESTAMP}", 1), (f"a@20-{MAX_TIMESTAMP}", 2)]
    windows = UnlimitedWindows.start_on(20)
    assert windows.windows_for(19) == {} and windows.windows_for(21) == {20: Window(20, MAX_TIMESTAMP)}
    assert windows.grace_period_ms() == 0
    with pytest.raises(WindowSpecError, match="cannot hop"):
        windows.advance_by(10)
