"""KStream-KStream windowed joins, record for record as Kafka Streams' join-semantics table: join
window 10 s, grace 5 s; left/outer results without a partner appear only once their window closed."""

from datetime import timedelta

import pytest

from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.join_options import StreamJoined
from strom.streams.kstream.windows import JoinWindows

from .join_semantics import ROWS, joiner, run_rows

# rows 1..15 lie within one window (milliseconds, as the table assumes); E, F, f, G are seconds apart
LATE_ROWS = [(40_000, "left", "E"), (60_000, "left", "F"), (80_000, "right", "f"), (100_000, "left", "G")]
EARLY = {4: ["[A, a]"], 5: ["[B, a]"], 6: ["[A, b]", "[B, b]"], 9: ["[C, a]", "[C, b]"],
         10: ["[A, c]", "[B, c]", "[C, c]"], 14: ["[A, d]", "[B, d]", "[C, d]"],
         15: ["[D, a]", "[D, b]", "[D, c]", "[D, d]"]}
LATE = {"join": {}, "left_join": {60_000: ["[E, None]"], 80_000: ["[F, None]"]},
        "outer_join": {60_000: ["[E, None]"], 80_000: ["[F, None]"], 100_000: ["[None, f]"]}}


def _topology(kind, stream_joined=None):
    builder = StreamsBuilder()
    left, right = builder.stream("left"), builder.stream("right")
    windows = JoinWindows.of_time_difference_and_grace(timedelta(seconds=10), timedelta(seconds=5))
    getattr(left, kind)(right, joiner, windows, stream_joined).to("output")
    return builder.build()


@pytest.mark.parametrize("in_memory", [True, False])
@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_stream_stream_join_semantics(kind, in_memory):
    rows = ROWS + LATE_ROWS
    expected = [(t, {**EARLY, **LATE[kind]}.get(t, [])) for t, _, _ in rows]
    stream_joined = StreamJoined.with_().with_in_memory_stores() if in_memory else None
    assert run_rows(_topology(kind, stream_joined), rows) == expected


def test_records_outside_the_window_do_not_join():
    rows = [(0, "left", "A"), (10_001, "right", "a"), (10_000, "right", "b")]
    assert run_rows(_topology("join"), rows) == [(0, []), (10_001, []), (10_000, ["[A, b]"])]


def test_asymmetric_windows_with_before_and_after():
    builder = StreamsBuilder()
    windows = JoinWindows.of_time_difference_with_no_grace(0).before(5).after(0)
    builder.stream("left").join(builder.stream("right"), joiner, windows).to("output")
    rows = [(10, "right", "early"), (12, "left", "L"), (13, "right", "late")]
    # only right records at most 5 ms before the left one join; later ones do not
    assert run_rows(builder.build(), rows) == [(10, []), (12, ["[L, early]"]), (13, [])]


def test_null_keys_join_with_none_in_left_and_outer_joins_only():
    rows = [(1, "left", "A"), (2, "right", "a")]
    for kind, expected in (("join", [(1, []), (2, [])]), ("left_join", [(1, ["[A, None]"]), (2, [])]),
                           ("outer_join", [(1, ["[A, None]"]), (2, ["[None, a]"])])):
        assert run_rows(_topology(kind), rows, key=None) == expected


@pytest.mark.parametrize("kind", ["join", "outer_join"])
def test_store_suppliers_given_per_side_or_as_dsl_store_suppliers(kind):
    from strom.errors import TopologyError
    from strom.streams import Stores, StoreType

    rows = ROWS + LATE_ROWS
    expected = [(t, {**EARLY, **LATE[kind]}.get(t, [])) for t, _, _ in rows]
    window, retention = 20_000, 25_000  # 10 s before + 10 s after; + 5 s grace
    joined = (StreamJoined.with_()
              .with_this_store_supplier(Stores.in_memory_window_store("mine", retention, window, True))
              .with_other_store_supplier(Stores.persistent_window_store("theirs", retention, window, True)))
    topology = _topology(kind, joined)
    assert {"mine", "theirs"} <= set(topology.internal.store_builders)
    assert run_rows(topology, rows) == expected
    assert run_rows(_topology(kind, StreamJoined.with_().with_dsl_store_suppliers(StoreType.IN_MEMORY)),
                    rows) == expected
    for supplier, message in ((Stores.in_memory_window_store("x", retention, window, False), "duplicates"),
                              (Stores.in_memory_window_store("x", 30_000, window, True), "retention 25000"),
                              ("not a supplier", "window store supplier")):
        with pytest.raises(TopologyError, match=message):
            _topology(kind, StreamJoined.with_().with_this_store_supplier(supplier))
    same = Stores.in_memory_window_store("same", retention, window, True)
    with pytest.raises(TopologyError, match="different names"):
        _topology(kind, StreamJoined.with_().with_this_store_supplier(same).with_other_store_supplier(same))
