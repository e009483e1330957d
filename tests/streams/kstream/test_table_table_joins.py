"""KTable-KTable joins, record for record as the documented primary-key join-semantics table."""

import pytest

from strom.kafka.serdes import Serdes
from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.options import Materialized, Named

from .join_semantics import ROWS, joiner, run_rows

TABLE_ROWS = [*ROWS, (17, "right", "d")]
TOMBSTONE = None

EXPECTED = {
    "join": {4: ["[A, a]"], 5: ["[B, a]"], 6: ["[B, b]"], 7: [TOMBSTONE], 10: ["[C, c]"], 11: [TOMBSTONE],
             15: ["[D, d]"], 17: ["[D, d]"]},
    "left_join": {3: ["[A, None]"], 4: ["[A, a]"], 5: ["[B, a]"], 6: ["[B, b]"], 7: [TOMBSTONE],
                  9: ["[C, None]"], 10: ["[C, c]"], 11: ["[C, None]"], 12: [TOMBSTONE], 15: ["[D, d]"],
                  17: ["[D, d]"]},
    "outer_join": {3: ["[A, None]"], 4: ["[A, a]"], 5: ["[B, a]"], 6: ["[B, b]"], 7: ["[None, b]"],
                   8: [TOMBSTONE], 9: ["[C, None]"], 10: ["[C, c]"], 11: ["[C, None]"], 12: [TOMBSTONE],
                   14: ["[None, d]"], 15: ["[D, d]"], 17: ["[D, d]"]},
}


def _topology(kind, materialized=None):
    builder = StreamsBuilder()
    left, right = builder.table("left"), builder.table("right")
    getattr(left, kind)(right, joiner, Named.as_("joined") if materialized else None,
                        materialized).to_stream().to("output")
    return builder.build()


@pytest.mark.parametrize("kind", ["join", "left_join", "outer_join"])
def test_table_table_join_semantics(kind):
    expected = [(t, EXPECTED[kind].get(t, [])) for t, _, _ in TABLE_ROWS]
    assert run_rows(_topology(kind), TABLE_ROWS) == expected


def test_materialized_join_result_is_queryable():
    from strom.streams.test_driver import TopologyTestDriver

    topology = _topology("left_join", Materialized.as_("join-result").with_value_serde(Serdes.String()))
    with TopologyTestDriver(topology, {"application.id": "tt", "default.key.serde": "String",
                                       "default.value.serde": "String"}) as driver:
        left = driver.create_input_topic("left", Serdes.String(), Serdes.String())
        right = driver.create_input_topic("right", Serdes.String(), Serdes.String())
        left.pipe_input("k", "A", 1)
        right.pipe_input("k", "a", 2)
        left.pipe_input("j", "B", 3)
        store = driver.get_key_value_store("join-result")
        assert (store.get("k"), store.get("j")) == ("[A, a]", "[B, None]")
