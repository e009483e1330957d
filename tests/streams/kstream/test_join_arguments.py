"""What KStream.join/left_join/outer_join and KTable.join/left_join/outer_join accept (Kafka's overloads):
which join each argument list picks, the generated node names per join kind, and the mistakes that
raise TopologyError."""

from datetime import timedelta

import pytest

from strom.errors import TopologyError
from strom.streams import Joined, JoinWindows, StreamsBuilder


def joiner(left, right):
    return f"{left}+{right}"


def node_names(builder: StreamsBuilder) -> set[str]:
    return set(builder.builder.internal.nodes)


@pytest.mark.parametrize(("method", "infix"), [("join", "JOIN"), ("left_join", "LEFTJOIN"),
                                               ("outer_join", "OUTERJOIN")])
def test_each_join_kind_names_its_nodes_as_kafka_streams(method, infix):
    streams, tables = StreamsBuilder(), StreamsBuilder()
    window = JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=5))
    getattr(streams.stream("a"), method)(streams.stream("b"), joiner, window)
    getattr(tables.table("a"), method)(tables.table("b"), joiner)
    assert {f"KSTREAM-{infix}THIS-", f"KSTREAM-{infix}OTHER-"} <= {n[:-10] for n in node_names(streams)}
    assert {f"KTABLE-{infix}THIS-", f"KTABLE-{infix}OTHER-"} <= {n[:-10] for n in node_names(tables)}


def test_a_stream_joins_a_table_or_a_global_table_by_the_arguments_given():
    builder = StreamsBuilder()
    stream = builder.stream("orders")
    stream.left_join(builder.table("prices"), joiner, Joined.as_("with-price"))
    stream.join(builder.global_table("customers"), lambda key, value: value, joiner)
    names = node_names(builder)
    assert "with-price" in names
    assert any(name.startswith("KSTREAM-JOIN-") for name in names)


def test_a_table_joins_on_a_foreign_key_when_given_an_extractor_and_a_joiner():
    builder = StreamsBuilder()
    builder.table("orders").join(builder.table("customers"), lambda order: order["customer"], joiner)
    assert any(name.endswith("-subscription-send") for name in node_names(builder))


@pytest.mark.parametrize(("build", "message"), [
    (lambda b: b.stream("a").outer_join(b.table("t"), joiner, None), "inner or left"),
    (lambda b: b.stream("a").join(b.stream("b"), joiner, None), "needs JoinWindows"),
    (lambda b: b.stream("a").join(b.table("t"), joiner, Joined.with_(), "extra"), "takes \\(table, joiner"),
    (lambda b: b.stream("a").join(["not", "a", "stream"], joiner), "joins a KStream, a KTable or a Global"),
    (lambda b: b.table("a").join(b.table("t"), joiner, None, None, "extra"), "takes \\(other, joiner, Named"),
    (lambda b: b.table("a").outer_join(b.table("t"), lambda v: v, joiner), "Foreign-key joins are inner"),
    (lambda b: b.table("a").join(StreamsBuilder().table("t"), joiner), "different StreamsBuilders"),
])
def test_join_mistakes_raise_a_topology_error_saying_what_is_wrong(build, message):
    with pytest.raises(TopologyError, match=message):
        build(StreamsBuilder())
