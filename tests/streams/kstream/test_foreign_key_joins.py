"""KTable-KTable foreign-key joins, record for record as the documented foreign-key join table:
left rows [pk, fk, value], right rows [fk, value]; the joined table is materialized."""

import pytest

from strom.kafka.serdes import Serdes
from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.options import Consumed, Materialized, Produced
from strom.streams.test_driver import TopologyTestDriver

PROPS = {"application.id": "fk-join", "default.key.serde": "String", "default.value.serde": "String"}
T = None  # tombstone

# (timestamp, side, key, value): left values are {"fk", "v"}, right values strings
ROWS = [(1, "left", "A", None), (2, "right", "a", None), (3, "left", "A", {"fk": "a", "v": 1}),
        (4, "right", "a", "10"), (5, "right", "a", "11"), (6, "left", "A", {"fk": "a", "v": 2}),
        (7, "left", "B", {"fk": "a", "v": 3}), (8, "right", "a", "12"), (9, "right", "c", "13"),
        (10, "left", "C", {"fk": "c", "v": 4}), (11, "left", "C", None), (12, "right", "c", None),
        (13, "right", "a", None), (14, "left", "B", None)]

EXPECTED = {
    "join": {4: [("A", "[A,a,1,a,10]")], 5: [("A", "[A,a,1,a,11]")], 6: [("A", "[A,a,2,a,11]")],
             7: [("B", "[B,a,3,a,11]")], 8: [("A", "[A,a,2,a,12]"), ("B", "[B,a,3,a,12]")],
             10: [("C", "[C,c,4,c,13]")], 11: [("C", T)], 13: [("A", T), ("B", T)]},
    "left_join": {3: [("A", "[A,a,1,NULL,NULL]")], 4: [("A", "[A,a,1,a,10]")], 5: [("A", "[A,a,1,a,11]")],
                  6: [("A", "[A,a,2,a,11]")], 7: [("B", "[B,a,3,a,11]")],
                  8: [("A", "[A,a,2,a,12]"), ("B", "[B,a,3,a,12]")], 10: [("C", "[C,c,4,c,13]")],
                  11: [("C", T)], 13: [("A", "[A,a,2,NULL,NULL]"), ("B", "[B,a,3,NULL,NULL]")],
                  14: [("B", T)]},
}


def joiner(key, left, right):
    fk = left["fk"]
    return f"[{key},{fk},{left['v']},{fk if right is not None else 'NULL'},{right or 'NULL'}]"


def _topology(kind, extractor=lambda value: value["fk"]):
    builder = StreamsBuilder()
    left = builder.table("left", Consumed.with_(Serdes.String(), Serdes.Json()))
    right = builder.table("right", Consumed.with_(Serdes.String(), Serdes.String()))
    result = getattr(left, kind)(right, extractor, joiner, None,
                                 Materialized.as_("fk-result").with_value_serde(Serdes.String()))
    result.to_stream().to("output", Produced.with_(Serdes.String(), Serdes.String()))
    return builder.build()


def _run(topology, rows):
    results = []
    with TopologyTestDriver(topology, PROPS) as driver:
        topics = {"left": driver.create_input_topic("left", Serdes.String(), Serdes.Json()),
                  "right": driver.create_input_topic("right", Serdes.String(), Serdes.String())}
        output = driver.create_output_topic("output", Serdes.String(), Serdes.String())
        for timestamp, side, key, value in rows:
            topics[side].pipe_input(key, value, timestamp)
            results.append((timestamp, output.read_key_values_to_list()))
    return results


@pytest.mark.parametrize("kind", ["join", "left_join"])
def test_foreign_key_join_semantics(kind):
    assert _run(_topology(kind), ROWS) == [(t, EXPECTED[kind].get(t, [])) for t, *_ in ROWS]


def test_changing_the_foreign_key_moves_the_row_to_the_new_right_value():
    rows = [(1, "right", "a", "10"), (2, "right", "b", "20"), (3, "left", "A", {"fk": "a", "v": 1}),
            (4, "left", "A", {"fk": "b", "v": 1}), (5, "right", "a", "11"),
            (6, "left", "A", {"fk": "x", "v": 1})]
    assert _run(_topology("join"), rows) == [
        (1, []), (2, []), (3, [("A", "[A,a,1,a,10]")]), (4, [("A", "[A,b,1,b,20]")]), (5, []),
        (6, [("A", T)])]


@pytest.mark.parametrize(("kind", "answer"), [("join", T), ("left_join", "[A,a,1,NULL,NULL]")])
def test_deleting_an_absent_right_key_answers_its_subscribers_again(kind, answer):
    """As Kafka's ForeignTableJoinProcessor: an uncached right table forwards the deletion of a key it
    never had, and every left row subscribed to that key gets an answer (found by the oracle)."""
    builder = StreamsBuilder()
    left = builder.table("left", Consumed.with_(Serdes.String(), Serdes.Json()))
    right = builder.table("right", Consumed.with_(Serdes.String(), Serdes.String()))
    getattr(left, kind)(right, lambda value: value["fk"], joiner).to_stream().to(
        "output", Produced.with_(Serdes.String(), Serdes.String()))
    props = {**PROPS, "statestore.cache.max.bytes": 0}
    with TopologyTestDriver(builder.build(props), props) as driver:
        left_rows = driver.create_input_topic("left", Serdes.String(), Serdes.Json())
        output = driver.create_output_topic("output", Serdes.String(), Serdes.String())
        left_rows.pipe_input("A", {"fk": "a", "v": 1}, 1)
        output.read_key_values_to_list()
        driver.create_input_topic("right", Serdes.String(), Serdes.String()).pipe_input("a", None, 2)
        assert output.read_key_values_to_list() == [("A", answer)]


def test_left_join_with_null_foreign_key_joins_with_none():
    rows = [(1, "left", "A", {"fk": None, "v": 1})]
    assert _run(_topology("left_join"), rows) == [(1, [("A", "[A,None,1,NULL,NULL]")])]


def test_internal_topics_and_store_are_named_as_kafka_names_them():
    from strom.streams.kstream.options import Named

    builder = StreamsBuilder()
    left, right = builder.table("left"), builder.table("right")
    left.join(right, lambda value: value, lambda a, b: a)
    left.join(right, lambda value: value, lambda a, b: a, Named.as_("orders"))
    internal = builder.build().internal
    topics = sorted(internal.internal_topics)
    assert [t.split("-0")[0] for t in topics if t.startswith("KTABLE")] == [
        "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION", "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE"]
    assert [t for t in topics if t.startswith("orders")] == [
        "orders-subscription-registration-topic", "orders-subscription-response-topic"]
    stores = set(internal.store_builders)
    assert "orders-subscription-store" in stores
    assert any(name.startswith("KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-") for name in stores)


@pytest.mark.parametrize("kind", ["join", "left_join"])
def test_a_key_value_foreign_key_extractor_sees_the_left_key_kip_1104(kind):
    seen = []

    def extractor(key, value):
        seen.append(key)
        return value["fk"]

    assert _run(_topology(kind, extractor), ROWS) == [(t, EXPECTED[kind].get(t, [])) for t, *_ in ROWS]
    assert set(seen) == {"A", "B", "C"}


def test_table_joined_partitioners_place_subscriptions_by_foreign_key_and_responses_by_primary_key():
    from strom.errors import TopologyError
    from strom.streams import StreamPartitioner, TableJoined

    seen: dict[str, list] = {"primary": [], "foreign": []}

    class Recording(StreamPartitioner):
        def __init__(self, which):
            self.which = which

        def partitions(self, topic, key, value, num_partitions):
            seen[self.which].append((topic.split("-")[-2], key, value, num_partitions))
            return {0}

    builder = StreamsBuilder()
    left = builder.table("left", Consumed.with_(Serdes.String(), Serdes.Json()))
    right = builder.table("right", Consumed.with_(Serdes.String(), Serdes.String()))
    joined = TableJoined.with_(Recording("primary"), Recording("foreign")).with_name("orders")
    (left.join(right, lambda value: value["fk"], joiner, joined,
               Materialized.as_("fk-result").with_value_serde(Serdes.String()))
     .to_stream().to("output", Produced.with_(Serdes.String(), Serdes.String())))
    rows = [(1, "right", "a", "10"), (2, "left", "A", {"fk": "a", "v": 1})]
    assert _run(builder.build(), rows) == [(1, []), (2, [("A", "[A,a,1,a,10]")])]
    assert seen["foreign"] == [("registration", "a", None, 1)]  # the subscription goes where "a" lives
    assert seen["primary"] == [("response", "A", None, 1)]  # the answer goes where "A" lives
    untyped = StreamsBuilder()
    with pytest.raises(TopologyError, match="key serde"):
        untyped.table("left").join(untyped.table("right"), lambda v: v, joiner,
                                   TableJoined.with_(Recording("primary")))
