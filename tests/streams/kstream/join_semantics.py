"""The inputs of the join-semantics tables in the Kafka Streams / ksqlDB documentation: all records
share one key, each row is one record (timestamp, side, value), processed in timestamp order."""

from strom.kafka.serdes import Serdes
from strom.streams.test_driver import TopologyTestDriver

KEY = "k"
PROPS = {"application.id": "join-semantics", "default.key.serde": "String", "default.value.serde": "String"}

# (timestamp, "left" | "right", value); None is a null value (a tombstone for tables)
ROWS = [(1, "left", None), (2, "right", None), (3, "left", "A"), (4, "right", "a"), (5, "left", "B"),
        (6, "right", "b"), (7, "left", None), (8, "right", None), (9, "left", "C"), (10, "right", "c"),
        (11, "right", None), (12, "left", None), (13, "right", None), (14, "right", "d"),
        (15, "left", "D")]


def joiner(left, right):
    return f"[{left}, {right}]"


def run_rows(topology, rows, props=PROPS, time_unit=1, key=KEY):
    """Pipes the rows and returns, per row, the values written to "output" while processing it."""
    results = []
    with TopologyTestDriver(topology, props) as driver:
        topics = {side: driver.create_input_topic(side, Serdes.String(), Serdes.String())
                  for side in ("left", "right")}
        output = driver.create_output_topic("output", Serdes.String(), Serdes.String())
        for timestamp, side, value in rows:
            topics[side].pipe_input(key, value, timestamp * time_unit)
            results.append((timestamp, output.read_values_to_list()))
    return results


def expected(table):
    """Rows of a documented table column as (timestamp, [outputs])."""
    return [(timestamp, table.get(timestamp, [])) for timestamp, _, _ in ROWS]
