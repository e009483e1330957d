"""ReadyQueues: the TopologyTestDriver takes records in the order Kafka's driver does (its
PartitionGroup's java.util.PriorityQueue), equal timestamps included."""

from __future__ import annotations

from strom.kafka.serdes import Serdes
from strom.streams import Grouped, Materialized, Produced, StreamsBuilder, TopologyTestDriver
from strom.streams.processor.internals.ready_queues import ReadyQueues

S, L = Serdes.String(), Serdes.Long()


def drain(queues: ReadyQueues) -> list[str]:
    order = []
    while queues:
        order.append(queues.poll())
    return order


def test_smallest_timestamp_first() -> None:
    queues = ReadyQueues()
    for timestamp, name in [(5, "a"), (3, "b"), (9, "c"), (1, "d")]:
        queues.offer(timestamp, name)
    assert drain(queues) == ["d", "b", "a", "c"]


def test_equal_timestamps_leave_as_java_s_binary_heap_leaves_them() -> None:
    queues = ReadyQueues()
    for name in "abc":
        queues.offer(0, name)
    # the root goes; the last moves up to the root and does not sink below an equal child
    assert drain(queues) == ["a", "c", "b"]


def test_an_entry_offered_again_with_an_equal_timestamp_goes_after_the_root() -> None:
    queues = ReadyQueues()
    queues.offer(0, "a")
    queues.offer(0, "b")
    assert queues.poll() == "a"
    queues.offer(0, "a")
    assert drain(queues) == ["b", "a"]
    queues.offer(0, "a")
    queues.offer(0, "b")
    assert queues.poll() == "a"
    queues.offer(-1, "a")  # strictly smaller: back to the root
    assert drain(queues) == ["a", "b"]


def test_membership() -> None:
    queues = ReadyQueues()
    entry = object()
    queues.offer(1, entry)
    assert entry in queues
    queues.poll()
    assert entry not in queues


def adding(weight: int):
    return lambda key, value, aggregate: aggregate + weight * value


def test_driver_reads_three_repartition_topics_filled_by_one_record_in_kafka_s_order() -> None:
    """One record reaches three repartition topics of the cogroup's task at one timestamp: Kafka's
    driver reads them in heap order (first, third, second), so the aggregate goes 1, 101, 111."""
    builder = StreamsBuilder()
    source = builder.stream("in")
    grouped = [source.group_by(lambda k, v: k, Grouped.as_(name)) for name in ("g1", "g2", "g3")]
    cogrouped = grouped[0].cogroup(adding(1)).cogroup(grouped[1], adding(10)).cogroup(grouped[2], adding(100))
    table = cogrouped.aggregate(lambda: 0, Materialized().with_value_serde(L).with_caching_disabled())
    table.to_stream().to("out", Produced.with_(S, L))
    props = {"application.id": "ready-queues", "default.key.serde": S, "default.value.serde": L}
    with TopologyTestDriver(builder.build(props), props) as driver:
        driver.create_input_topic("in", S, L).pipe_input("k", 1, timestamp=0)
        assert driver.create_output_topic("out", S, L).read_values_to_list() == [1, 101, 111]
