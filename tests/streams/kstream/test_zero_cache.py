"""statestore.cache.max.bytes = 0 turns store caching off, as in Kafka Streams (issue 28's oracle found it):
a table then forwards every update, a tombstone for a key it never held included."""

from strom.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder, TopologyTestDriver


def _tombstone_outputs(cache_bytes: int) -> list[tuple[str, int | None]]:
    builder = StreamsBuilder()
    builder.stream("in", Consumed.with_(Serdes.String(), Serdes.Long())).to_table(
        Materialized.as_("table")).to_stream().to("out", Produced.with_(Serdes.String(), Serdes.Long()))
    props = {"application.id": "zero-cache", "statestore.cache.max.bytes": cache_bytes,
             "default.key.serde": Serdes.String(), "default.value.serde": Serdes.Long()}
    with TopologyTestDriver(builder.build(), props) as driver:
        driver.create_input_topic("in", Serdes.String(), Serdes.Long()).pipe_input("a", None, 0)
        return driver.create_output_topic("out", Serdes.String(), Serdes.Long()).read_key_values_to_list()


def test_a_zero_byte_cache_forwards_a_tombstone_for_an_absent_key() -> None:
    assert _tombstone_outputs(0) == [("a", None)]


def test_a_cache_drops_a_tombstone_for_an_absent_key() -> None:
    assert _tombstone_outputs(10 * 1024 * 1024) == []
