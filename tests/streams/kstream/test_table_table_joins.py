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


def _join_reading_an_unstored_join(materialized_inner):
    """``outer`` joins a filter of ``t`` with the join of ``t`` and ``u``; within one record of ``t`` the
    filter's update reaches ``outer`` before the inner join has processed it."""
    builder = StreamsBuilder()
    t, u = builder.table("t"), builder.table("u")
    kept = t.filter(lambda _k, _v: True, Materialized.as_("kept").with_caching_disabled())
    inner = t.left_join(u, joiner, None, materialized_inner)
    kept.left_join(inner, joiner).to_stream().to("output")
    return builder.build()


def test_a_join_reads_an_unstored_join_result_through_its_tables_stores():
    """As Kafka's value getters: the unstored inner join is computed from t's and u's stores when read,
    so it already shows t's new value; a stored one shows what the inner join has processed so far."""
    from strom.streams.test_driver import TopologyTestDriver

    props = {"application.id": "tt", "default.key.serde": "String", "default.value.serde": "String"}
    stored = Materialized.as_("inner").with_caching_disabled()
    for materialized, first in [(None, "[A, [A, None]]"), (stored, "[A, None]")]:
        topology = _join_reading_an_unstored_join(materialized)
        with TopologyTestDriver(topology, props) as driver:
            driver.create_input_topic("t", Serdes.String(), Serdes.String()).pipe_input("k", "A", 1)
            out = driver.create_output_topic("output", Serdes.String(), Serdes.String())
            assert out.read_values_to_list() == [first, "[A, [A, None]]"]
        stores = set(topology.internal.store_builders)
        assert ("inner" in stores) is (materialized is not None)
        assert len(stores) == 3 + (materialized is not None)  # t's, u's (read by the join) and "kept"


def test_a_self_left_join_s_old_value_from_nowhere_is_not_subtracted():
    """The right side of a left self-join sends an old value joined with None that no aggregate ever
    added; as Kafka's KTableAggregate, a count subtracts an old value only from an aggregate it has (found
    by the oracle: strom counted -1)."""
    from strom.streams.test_driver import TopologyTestDriver

    builder = StreamsBuilder()
    table = builder.table("t")
    joined = table.left_join(table, joiner)
    joined.group_by(lambda _key, value: (value, value)).count().to_stream().to("output")
    props = {"application.id": "tt", "default.key.serde": "String", "default.value.serde": "String",
             "statestore.cache.max.bytes": 0}
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("t", Serdes.String(), Serdes.String()).pipe_input("k", "A", 1)
        output = driver.create_output_topic("output", Serdes.String(), Serdes.Long())
        assert output.read_key_values_to_list() == [("[A, A]", 1), ("[A, None]", None), ("[A, A]", 2)]
