"""A topology started again on the same state (a new task, as each Spark micro-batch creates) keeps
its stream time: closed windows stay closed, waiting outer-join records still come out."""

from strom.kafka.serdes import Serdes
from strom.streams import JoinWindows, Materialized, StreamsBuilder, TimeWindows, TopologyTestDriver

PROPS = {"application.id": "restart", "default.key.serde": "String", "default.value.serde": "String"}


def _drive(topology, state_dir, pipes, output=None):
    with TopologyTestDriver(topology, PROPS | {"state.dir": str(state_dir)}) as driver:
        topics = {}
        for topic, key, timestamp in pipes:
            topics.setdefault(topic, driver.create_input_topic(topic, Serdes.String(), Serdes.String()))
            topics[topic].pipe_input(key, "v", timestamp)
        if output is None:
            return driver.metrics["dropped_records"]
        return driver.create_output_topic(output, Serdes.String(), Serdes.String()).read_values_to_list()


def test_windows_closed_before_a_restart_stay_closed(tmp_path):
    def topology():
        builder = StreamsBuilder()
        builder.stream("input").group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(10)).count(
            materialized=Materialized.as_("counts"))
        return builder.build()

    assert _drive(topology(), tmp_path, [("input", "a", 0), ("input", "a", 25)]) == 0
    # stream time was 25: the window [0, 10) is closed, also for the new task
    assert _drive(topology(), tmp_path, [("input", "a", 5)]) == 1


def test_outer_join_records_waiting_before_a_restart_are_emitted_after_it(tmp_path):
    def topology():
        builder = StreamsBuilder()
        builder.stream("left").left_join(builder.stream("right"), lambda left, right: f"{left}+{right}",
                                         JoinWindows.of_time_difference_with_no_grace(10)).to("output")
        return builder.build()

    assert _drive(topology(), tmp_path, [("left", "a", 0)], "output") == []
    assert _drive(topology(), tmp_path, [("right", "b", 100)], "output") == ["v+None"]
