"""Interactive queries on a standalone cluster of two one-core workers, with a standby of each task on
the other worker: the word count is queried over its driver's HTTP face (``?stale=true``) while the
worker running some of its tasks is SIGKILLed. Every answer is the committed count or a retriable 503;
standbys (or the tasks a finished thread keeps parked) answer while the lost tasks move; once they run
again every key answers from an active."""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter

import pytest

from support.spark_cluster import SparkCluster

from .cluster_wordcount import DEFAULTS, WordCountDriver, caught_up
from .conftest import produce_lines

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(900)]

OVERRIDES = json.dumps({**json.loads(DEFAULTS), "num.standby.replicas": 1, "query.http.port": 0})


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_lost_worker_s_keys_are_answered_by_standbys_and_never_wrong(tmp_path_factory, broker, topics,
                                                                         tmp_path):
    names = topics(lines=2, counts=2)
    rng = random.Random(41)
    lines = [(f"k{i}", " ".join(rng.choices([f"w{n}" for n in range(30)], k=3))) for i in range(600)]
    expected = Counter(word for _, line in lines for word in line.split())
    produce_lines(broker.bootstrap_servers, names["lines"], lines)
    app_id = f"iq-cluster-{uuid.uuid4().hex[:8]}"
    answers: list[tuple[str, int, dict]] = []
    stop = threading.Event()
    with SparkCluster(tmp_path_factory.mktemp("cluster"), workers=2, cores_per_worker=1) as cluster, \
            WordCountDriver(cluster, broker.bootstrap_servers, names, tmp_path, app_id, "realtime",
                            OVERRIDES) as driver:
        url_file = tmp_path / f"state-{app_id}" / app_id / "query.url"
        driver.wait_until(lambda: url_file.exists() and caught_up(broker.bootstrap_servers, app_id,
                                                                  driver.partitions), 300, "caught up")
        driver.wait_until(lambda: driver.tasks_on(0) and driver.tasks_on(1), 120, "tasks on both workers")
        base = url_file.read_text().strip()
        driver.wait_until(lambda: all(_get(f"{base}/stores/counts/keys/{w}")[0] == 200 for w in expected),
                          120, "every key answered")
        time.sleep(3.0)  # the standbys read the changelogs every half second

        def ask() -> None:
            while not stop.is_set():
                for word in expected:
                    status, body = _get(f"{base}/stores/counts/keys/{word}?stale=true")
                    answers.append((word, status, body))

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        time.sleep(2.0)
        cluster.kill_worker(0)
        killed_at = len(answers)
        driver.wait_until(lambda: len(answers) > killed_at + 3 * len(expected) and all(
            s == 200 and not b["standby"] for _, s, b in answers[-len(expected):]), 240, "actives answering")
        stop.set()
        asking.join(60)
        driver.finish()
    wrong = [(w, b) for w, s, b in answers if s == 200 and b["value"] != expected[w]]
    assert not wrong, wrong[:5]
    assert all(s == 503 and b["retriable"] for _, s, b in answers if s != 200), [
        (s, b) for _, s, b in answers if s != 200][:5]
    standby = sum(1 for _, s, b in answers[killed_at:] if s == 200 and b["standby"])
    unavailable = Counter(b["error"].split(":", 1)[1][:60] for _, s, b in answers if s == 503)
    print(f"{len(answers)} key queries: {standby} answered by standbys after the kill, "
          f"{sum(unavailable.values())} retriable 503s: {unavailable}")
    assert standby > 0, "no standby answered while the lost worker's tasks moved"
