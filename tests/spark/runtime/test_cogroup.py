"""A cogrouped aggregation on Spark, exactly-once: two input topics, one of them re-keyed through a
repartition topic, one store; the final totals match the TopologyTestDriver's and every page's
updates rise strictly (no update written twice)."""

from __future__ import annotations

import random

import pytest

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

PAGES = [f"/p{i}" for i in range(8)]


def page_totals(clicks: str, views: str, out: str) -> Topology:
    """Clicks (user → page) count 1 each, re-keyed by page; views (page → n) add n."""
    builder = StreamsBuilder()
    by_page = builder.stream(clicks, Consumed.with_(S, S)).group_by(
        lambda user, page: page, Grouped.as_("clicks-by-page").with_key_serde(S).with_value_serde(S))
    views_by_page = builder.stream(views, Consumed.with_(S, S)).group_by_key()
    (by_page.cogroup(lambda page, user, total: total + 1)
        .cogroup(views_by_page, lambda page, n, total: total + int(n))
        .aggregate(lambda: 0, Materialized.as_("page-totals").with_value_serde(L))
        .to_stream()
        .to(out, Produced.with_(S, L)))
    return builder.build()


def test_cogroup_on_spark_matches_the_topology_test_driver(broker, spark, topics, tmp_path, mode_props):
    names = topics(clicks=2, views=2, totals=2)
    rng = random.Random(11)
    clicks = [(f"user{rng.randrange(50)}", rng.choice(PAGES)) for _ in range(300)]
    views = [(rng.choice(PAGES), str(rng.randint(1, 9))) for _ in range(300)]
    produce_lines(broker.bootstrap_servers, names["clicks"], clicks)
    produce_lines(broker.bootstrap_servers, names["views"], views)
    topology = page_totals(names["clicks"], names["views"], names["totals"])

    app_id = f"rt-cogroup-{names['clicks']}"
    app = run_until_caught_up(spark, topology, broker, tmp_path, app_id, **mode_props)

    with TopologyTestDriver(page_totals(names["clicks"], names["views"], names["totals"])) as driver:
        driver.create_input_topic(names["clicks"], S, S).pipe_record_list(clicks)
        driver.create_input_topic(names["views"], S, S).pipe_record_list(views)
        expected = dict(driver.get_key_value_store("page-totals").all())
    assert sum(expected.values()) == len(clicks) + sum(int(n) for _, n in views)
    updates = read_updates(broker.bootstrap_servers, names["totals"])
    assert {page: seen[-1] for page, seen in updates.items()} == expected
    for page, seen in updates.items():
        assert seen == sorted(set(seen)), f"{page}: an update was written twice or out of order: {seen}"
    assert {"0_0", "0_1", "1_0", "1_1"} <= set(app.plan.task_ids)
