"""A word count with a repartition topic on Spark, exactly-once, against the TopologyTestDriver.

The same lines go through SparkStreams (2 input partitions, so tasks 0_0, 0_1, 1_0, 1_1) and
through the TopologyTestDriver. Spark emits fewer updates (the record cache merges those of one
micro-batch) but every key's final count and the stores must agree; read_committed, each key's
updates rise strictly, so no update was written twice, also when batches ran on tasks kept open.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from strom.spark.runtime import SparkStreams
from strom.streams import TopologyTestDriver

from .conftest import produce_lines, read_updates, run_until_caught_up, wait_for
from .wordcount import L, S, word_count

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

WORDS = [f"w{i}" for i in range(25)]


def _lines(rng: random.Random, n: int) -> list[tuple[str, str]]:
    return [(f"k{i}", " ".join(rng.choices(WORDS, k=rng.randint(1, 6)))) for i in range(n)]


def _driver_counts(topics: dict[str, str], lines: list[tuple[str, str]]) -> dict[str, int]:
    with TopologyTestDriver(word_count(topics["lines"], topics["counts"])) as driver:
        source = driver.create_input_topic(topics["lines"], S, S)
        for key, line in lines:
            source.pipe_input(key, line)
        return driver.create_output_topic(topics["counts"], S, L).read_key_values_to_map()


def _props(broker, state_dir: Path, app_id: str, mode_props: dict, per_trigger: int = 1000) -> dict:
    return {"application.id": app_id, "bootstrap.servers": broker.bootstrap_servers,
            "processing.guarantee": "exactly_once_v2", "state.dir": str(state_dir),
            "commit.interval.ms": 200, "max.offsets.per.trigger": per_trigger, **mode_props}


def _assert_exactly_once(updates: dict[str, list[int]], expected: dict[str, int]) -> None:
    assert {k: v[-1] for k, v in updates.items()} == expected
    for key, seen in updates.items():
        assert seen == sorted(set(seen)), f"{key}: an update was written twice or out of order: {seen}"


def test_word_count_with_repartition_matches_topology_test_driver(broker, spark, topics, tmp_path,
                                                                  mode_props):
    names = topics(lines=2, counts=2)
    lines = _lines(random.Random(7), 300)
    produce_lines(broker.bootstrap_servers, names["lines"], lines)

    app = SparkStreams(word_count(names["lines"], names["counts"]),  # several micro-batches per task
                       _props(broker, tmp_path, f"rt-wc-{names['lines']}", mode_props, per_trigger=250),
                       spark)
    app.start()
    try:
        assert app.wait_until_caught_up(150), f"lag {app.lag()}"
        if app.realtime:  # input after a batch end: the next batch's threads keep or take over the tasks
            assert wait_for(lambda: app.progress.batches > 0, 60)
            more = _lines(random.Random(8), 50)
            produce_lines(broker.bootstrap_servers, names["lines"], more)
            lines += more
            assert app.wait_until_caught_up(150), f"lag {app.lag()}"
            assert wait_for(lambda: app.progress.reused > 0, 30), app.progress  # reported after a commit
    finally:
        app.stop()

    expected = _driver_counts(names, lines)
    assert expected == Counter(w for _, line in lines for w in line.split())
    _assert_exactly_once(read_updates(broker.bootstrap_servers, names["counts"]), expected)
    assert set(app.plan.task_ids) == {"0_0", "0_1", "1_0", "1_1"}
    assert app.progress.records == len(lines) + sum(expected.values())  # lines, then words
    if not app.realtime:  # several micro-batches per task; whether a batch finds its task open depends
        # on which Python worker Spark hands it (test_task_reuse.py checks reuse itself)
        assert all(app.progress.tasks[t].batches >= 2 for t in ("0_0", "0_1")), app.progress


def test_state_restores_from_changelog_when_state_dir_is_wiped(broker, spark, topics, tmp_path,
                                                                mode_props):
    names = topics(lines=2, counts=2)
    rng = random.Random(11)
    first, second = _lines(rng, 150), _lines(rng, 150)
    app_id = f"rt-restore-{names['lines']}"
    produce_lines(broker.bootstrap_servers, names["lines"], first)
    app = run_until_caught_up(spark, word_count(names["lines"], names["counts"]), broker, tmp_path, app_id,
                              **{"max.offsets.per.trigger": 1000, **mode_props})

    app.clean_up()  # local RocksDB stores and checkpoints are gone
    assert not (tmp_path / app_id).exists()
    produce_lines(broker.bootstrap_servers, names["lines"], second)
    again = run_until_caught_up(spark, word_count(names["lines"], names["counts"]), broker, tmp_path,
                                app_id, **{"max.offsets.per.trigger": 1000, **mode_props})

    assert again.progress.records == len(second) + sum(len(line.split()) for _, line in second)
    restored = sum(again.progress.tasks[t].restored for t in ("1_0", "1_1"))
    assert restored > 0, again.progress  # the count stores were rebuilt from their changelogs
    _assert_exactly_once(read_updates(broker.bootstrap_servers, names["counts"]),
                         _driver_counts(names, first + second))
