"""merge.repartition.topics on Spark: a re-keyed stream counted and reduced writes one repartition topic
(not two) and gives the unoptimized topology's results."""

from __future__ import annotations

import uuid

import pytest

from strom.kafka import clients
from strom.streams import (
    Consumed,
    Grouped,
    Materialized,
    Produced,
    StreamsBuilder,
    Topology,
    TopologyTestDriver,
)

from .conftest import produce_lines, read_updates, run_until_caught_up
from .wordcount import L, S

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

LINES = [(f"k{i}", f"{'abcde'[i % 5]}{i}") for i in range(60)]


def first_letters(lines: str, counts: str, joined: str, optimization: str) -> Topology:
    builder = StreamsBuilder()
    rekeyed = (builder.stream(lines, Consumed.with_(S, S))
               .select_key(lambda key, value: value[0])
               .filter(lambda key, value: not value.endswith("7")))
    (rekeyed.group_by_key(Grouped.with_(S, S)).count(Materialized.as_("counts"))
        .to_stream().to(counts, Produced.with_(S, L)))
    (rekeyed.group_by_key(Grouped.with_(S, S)).reduce(lambda a, b: f"{a},{b}", Materialized.as_("words"))
        .to_stream().to(joined, Produced.with_(S, S)))
    return builder.build({"application.id": "letters", "topology.optimization": optimization})


def _latest(updates: dict[str, list]) -> dict[str, object]:
    return {key: values[-1] for key, values in updates.items()}


def test_one_repartition_topic_and_the_unoptimized_results(broker, spark, topics, tmp_path):
    names = topics(lines=2, counts=2, joined=2)
    bootstrap = broker.bootstrap_servers
    produce_lines(bootstrap, names["lines"], LINES)
    app_id = f"rt-merged-{uuid.uuid4().hex[:8]}"
    topology = first_letters(names["lines"], names["counts"], names["joined"], "all")
    run_until_caught_up(spark, topology, broker, tmp_path, app_id, **{"execution.mode": "microbatch"})

    with TopologyTestDriver(first_letters("lines", "counts", "joined", "none")) as driver:
        driver.create_input_topic("lines", S, S).pipe_key_value_list(LINES)
        counts = driver.create_output_topic("counts", S, L).read_key_values_to_map()
        joined = driver.create_output_topic("joined", S, S).read_key_values_to_map()
    # c7, c17, ... c57 are filtered out
    assert _latest(read_updates(bootstrap, names["counts"])) == counts == {"a": 12, "b": 12, "c": 6, "d": 12,
                                                                          "e": 12}
    words = _latest(read_updates(bootstrap, names["joined"], value_serde=S))
    # partitions interleave differently on Spark: compare the words each letter collected
    assert {k: sorted(v.split(",")) for k, v in words.items()} == {
        k: sorted(v.split(",")) for k, v in joined.items()}
    topics_now = clients.admin(bootstrap).list_topics(timeout=10).topics
    assert sorted(t for t in topics_now if t.startswith(app_id) and t.endswith("-repartition")) == [
        f"{app_id}-counts-repartition"]
