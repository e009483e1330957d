"""KStream-KTable joins, record for record as the documented join-semantics table."""

from strom.streams.kstream.builder import StreamsBuilder
from strom.streams.kstream.join_options import Joined
from strom.streams.kstream.options import Materialized

from .join_semantics import ROWS, expected, joiner, run_rows


def _topology(kind):
    builder = StreamsBuilder()
    stream = builder.stream("left")
    table = builder.table("right")
    joined = getattr(stream, kind)(table, joiner)
    joined.to("output")
    return builder.build()


def test_stream_table_inner_join():
    assert run_rows(_topology("join"), ROWS) == expected({5: ["[B, a]"], 15: ["[D, d]"]})


def test_stream_table_left_join():
    assert run_rows(_topology("left_join"), ROWS) == expected(
        {3: ["[A, None]"], 5: ["[B, a]"], 9: ["[C, None]"], 15: ["[D, d]"]})


def test_stream_table_join_with_key_joiner_and_named_materialized_table():
    builder = StreamsBuilder()
    table = builder.table("right", materialized=Materialized.as_("right-store"))
    builder.stream("left").filter(lambda k, v: True).join(
        table, lambda key, left, right: f"{key}:{left}+{right}", Joined.as_("enrich")).to("output")
    rows = [(1, "right", "x"), (2, "left", "L")]
    assert run_rows(builder.build(), rows) == [(1, []), (2, ["k:L+x"])]


def test_stream_with_changed_key_is_repartitioned_with_the_joined_serdes():
    from strom.kafka.serdes import Serdes
    from strom.streams.kstream.options import Consumed

    builder = StreamsBuilder()
    table = builder.table("right")
    (builder.stream("left", Consumed.with_(Serdes.String(), Serdes.String()))
     .select_key(lambda key, value: value).map_values(len)
     .join(table, lambda left, right: f"{left}:{right}", Joined.with_(Serdes.String(), Serdes.Long()))
     .to("output"))
    topology = builder.build()
    assert any(topic.endswith("-left-repartition") for topic in topology.internal.internal_topics)
    rows = [(1, "right", "x"), (2, "left", "k")]  # the left value "k" becomes the key
    assert run_rows(topology, rows) == [(1, []), (2, ["1:x"])]
