"""Interactive queries on a standalone cluster of two one-core workers, with a standby of each task on
the other worker: the word count is queried over its driver's HTTP face (``?stale=true``) while the
worker running active tasks of its ``counts`` store is SIGKILLed (the store's ``/metadata`` names the
endpoint, the process listening on its port the worker). Every answer is the committed count or a
retriable 503; standbys (or the tasks a finished thread keeps parked) answer while the lost tasks move;
once they run again every key answers from an active."""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

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


def _listening(port: int) -> int | None:
    """The process that listens on TCP ``port`` here (its socket's inode in /proc/net, then the process
    whose descriptor is that socket)."""
    inodes = {f"socket:[{fields[9]}]" for table in ("/proc/net/tcp", "/proc/net/tcp6")
              for fields in (line.split() for line in Path(table).read_text().splitlines()[1:])
              if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A"}
    for fds in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in inodes for fd in fds.iterdir()):
                return int(fds.parent.name)
        except OSError:  # a process gone meanwhile
            continue
    return None


def _serving(base: str) -> list[dict]:
    """The endpoints serving ``counts`` now (host, port, active and standby partitions)."""
    status, body = _get(f"{base}/stores/counts/metadata")
    assert status == 200, body
    return body["endpoints"]


def _victim(cluster: SparkCluster, base: str) -> tuple[int, set[int]] | None:
    """A worker running active tasks of ``counts`` whose standbys are on the other worker, and the
    partitions it runs; None until the assignment is that far."""
    endpoints = _serving(base)
    actives = {p: e["port"] for e in endpoints for p in e["active"]}
    standbys = {p: e["port"] for e in endpoints for p in e["standby"]}
    if sorted(actives) != [0, 1] or sorted(standbys) != [0, 1]:
        return None
    port = actives[0]
    pid = _listening(port)
    worker = cluster.worker_of(pid) if pid is not None else None
    lost = {p for p, at in actives.items() if at == port}
    if worker is None or any(standbys[p] == port for p in lost):
        return None
    return worker, lost


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
        base = url_file.read_text().strip()
        driver.wait_until(lambda: all(_get(f"{base}/stores/counts/keys/{w}")[0] == 200 for w in expected),
                          120, "every key answered")
        status, body = _get(f"{base}/stores/counts/range")  # both partitions, from both workers
        assert status == 200 and dict(body["entries"]) == expected, body
        # the worker to lose runs active tasks of counts (a thread may run none: the assignor keeps
        # tasks where they are parked, so after a first batch of one thread the second thread gets the
        # counts tasks both); each has its standby on the other worker
        driver.wait_until(lambda: _victim(cluster, base) is not None, 120, "counts' actives and standbys "
                          "on both workers")
        time.sleep(3.0)  # the standbys read the changelogs every half second
        victim, lost = _victim(cluster, base) or (-1, set())
        assert victim >= 0, _serving(base)

        def ask() -> None:
            while not stop.is_set():
                for word in expected:
                    status, body = _get(f"{base}/stores/counts/keys/{word}?stale=true")
                    answers.append((word, status, body))

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        time.sleep(2.0)
        cluster.kill_worker(victim)
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
    standby = sum(1 for _, s, b in answers[killed_at:]
                  if s == 200 and b["standby"] and b["partition"] in lost)
    unavailable = Counter(b["error"].split(":", 1)[1][:60] for _, s, b in answers if s == 503)
    print(f"worker {victim} killed (active partitions {sorted(lost)} of counts); {len(answers)} key queries: "
          f"{standby} answered by standbys after the kill, {sum(unavailable.values())} retriable 503s: "
          f"{unavailable}")
    assert standby > 0, "no standby answered while the lost worker's tasks moved"
