"""Interactive queries on a standalone cluster of two one-core workers, with a standby of each task on
the other worker. Once the input is processed, every query type the docs name is asked through the
driver's Python API (``cluster_queries.py`` answers on request: IQv2, the key and store metadata, the
IQv1 views) and over its HTTP face, and checked against the TopologyTestDriver's stores. Then the word
count is queried over HTTP (``?stale=true``) while the worker running active tasks of its ``counts``
store is SIGKILLed (the store's ``/metadata`` names the endpoint, the process listening on its port the
worker). Every answer is the committed count or a retriable 503; standbys (or the tasks a finished
thread keeps parked) answer while the lost tasks move; once they run again every key answers from an
active."""

from __future__ import annotations

import json
import os
import pickle
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from strom.streams import QueryableStoreTypes, TopologyTestDriver
from support.spark_cluster import SparkCluster

from .cluster_queries import FOREVER, queried
from .cluster_wordcount import DEFAULTS, WordCountDriver, caught_up
from .test_interactive_queries import BASE_MS, _produce
from .wordcount import S

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(900)]

OVERRIDES = json.dumps({**json.loads(DEFAULTS), "num.standby.replicas": 1, "query.http.port": 0})
APP = Path(__file__).with_name("cluster_queries.py")
Q = QueryableStoreTypes


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


def _expected(names: dict[str, str], lines: list[tuple[str, str, int]]) -> dict[str, Any]:
    """What the TopologyTestDriver's stores hold after the same input, read through the same views."""
    with TopologyTestDriver(queried(names["lines"], names["counts"])) as driver:
        source = driver.create_input_topic(names["lines"], S, S)
        for key, line, timestamp in lines:
            source.pipe_input(key, line, timestamp)

        def view(store: str, kind: Any) -> Any:
            return kind.view(store, [driver.get_state_store(store)])

        return {"counts": dict(view("counts", Q.key_value_store()).all()),
                "stamped": dict(view("counts", Q.timestamped_key_value_store()).all()),
                "windowed": {(w.key, w.window.start): n for w, n in view("windowed", Q.window_store()).all()},
                "sessions w3": [(w.window.start, w.window.end, n)
                                for w, n in view("sessions", Q.session_store()).fetch("w3")],
                "version k7": view("lines", Q.versioned_key_value_store()).get("k7")}


def _ask_driver(driver: WordCountDriver) -> dict[str, Any]:
    """What the driver's Python API answered (cluster_queries.py), asked through its files."""
    answered = Path(f"{driver.input_done}.answers")
    Path(f"{driver.input_done}.ask").touch()
    driver.wait_until(answered.exists, 120, "the driver's answers")
    return pickle.loads(answered.read_bytes())


def _merged(answer: dict[int, Any]) -> list:
    return [entry for p in sorted(answer) for entry in answer[p]]


def _assert_python_api(found: dict[str, Any], expected: dict[str, Any], app_id: str, base: str) -> None:
    counts, stamped, windowed = expected["counts"], expected["stamped"], expected["windowed"]
    partition = {word: meta[0] for word, meta in found["key metadata"].items()}
    assert found["key w3"] == {partition["w3"]: counts["w3"]}  # routed: the key's partition alone
    assert found["bounded w3"] == found["key w3"]
    assert set(found["key nope"].values()) == {None}
    assert found["stamped w3"] == {partition["w3"]: stamped["w3"]}
    for name, wanted in (("all", counts), ("stamped all", stamped),
                         ("range w1..w13", {k: v for k, v in counts.items() if "w1" <= k <= "w13"}),
                         ("from w2", {k: v for k, v in counts.items() if k >= "w2"}),
                         ("to w2", {k: v for k, v in counts.items() if k <= "w2"})):
        assert dict(_merged(found[name])) == wanted, name
        assert all(list(entries) == sorted(entries) for entries in found[name].values()), name
    assert dict(_merged(found["descending"])) == counts
    assert all([k for k, _ in entries] == sorted((k for k, _ in entries), reverse=True)
               for entries in found["descending"].values())
    assert found["partition 0"] == {0: found["all"][0]} and found["all"][0] and found["all"][1]
    assert {word: p for p, entries in found["all"].items() for word, _ in entries} == partition
    assert _merged(found["window w3"]) == sorted((s, n) for (w, s), n in windowed.items() if w == "w3")
    assert {(w.key, w.window.start): n for w, n in _merged(found["windows"])} == windowed
    sessions = [(w.window.start, w.window.end, n) for w, n in _merged(found["sessions w3"])]
    assert sessions == expected["sessions w3"]
    assert [v for v in found["version k7"].values() if v is not None] == [expected["version k7"]]
    (before,) = found["version k7 before"].values()  # as of just before its one version: none
    assert before and set(before.values()) == {None}
    assert _merged(found["versions k7"]) == [expected["version k7"]]
    assert found["position topics"] == [f"{app_id}-words-repartition"]
    served = _serving(base)
    assert {port for port, _, _ in found["store metadata"]} == {e["port"] for e in served}
    assert sorted(p for _, active, _ in found["store metadata"] for p in active) == [0, 1]
    for word, (p, active_port, _) in found["key metadata"].items():
        status, body = _get(f"{base}/stores/counts/keys/{word}")
        assert status == 200 and body["partition"] == p and body["value"] == counts[word], (word, body)
        assert active_port in {e["port"] for e in served}
    view = found["view"]
    assert view["get w3"] == counts["w3"] and view["all"] == sorted(counts.items())
    assert view["range"] == sorted((k, v) for k, v in counts.items() if "w1" <= k <= "w13")
    assert sorted(view["prefix w1"]) == sorted((k, v) for k, v in counts.items() if k.startswith("w1"))
    assert view["entries"] >= len(counts) and view["stamped w3"] == stamped["w3"]
    assert view["window fetch w3"] == _merged(found["window w3"])
    assert [(w.window.start, w.window.end, n) for w, n in view["sessions w3"]] == expected["sessions w3"]
    assert view["version k7"] == expected["version k7"]


def _assert_http(base: str, expected: dict[str, Any], found: dict[str, Any]) -> None:
    """The same reads over HTTP, each route the docs show."""
    counts, windowed = expected["counts"], expected["windowed"]
    status, body = _get(f"{base}/stores/counts/range")  # both partitions, from both workers
    assert status == 200 and dict(body["entries"]) == counts, body
    status, body = _get(f"{base}/stores/counts/range?from=w1&to=w13")
    assert status == 200 and dict(body["entries"]) == {k: v for k, v in counts.items() if "w1" <= k <= "w13"}
    status, body = _get(f"{base}/stores/counts/range?partition=0")
    assert status == 200 and [tuple(e) for e in body["entries"]] == found["all"][0], body
    assert _get(f"{base}/stores/counts/keys/nope")[0] == 404
    status, body = _get(f"{base}/stores/windowed/keys/w3/windows?from=0&to={FOREVER}")
    assert status == 200 and [tuple(e) for e in body["entries"]] == _merged(found["window w3"]), body
    status, body = _get(f"{base}/stores/windowed/windows?from=0&to={FOREVER}")
    assert status == 200 and {(e[0]["key"], e[0]["start"]): e[1] for e in body["entries"]} == windowed
    status, body = _get(f"{base}/stores/sessions/keys/w3/sessions")
    assert status == 200 and [(e[0]["start"], e[0]["end"], e[1]) for e in body["entries"]] == expected[
        "sessions w3"], body
    version = expected["version k7"]
    status, body = _get(f"{base}/stores/lines/keys/k7")
    assert status == 200 and body["value"] == {"value": version.value, "timestamp": version.timestamp,
                                               "valid_to": None}, body
    assert _get(f"{base}/stores/lines/keys/k7?as_of={version.timestamp - 1}")[0] == 404
    status, body = _get(f"{base}/stores/counts/windows?from=0&to=10")
    assert status == 400 and body["reason"] == "UNKNOWN_QUERY_TYPE"


def test_a_lost_worker_s_keys_are_answered_by_standbys_and_never_wrong(tmp_path_factory, broker, topics,
                                                                         tmp_path):
    names = topics(lines=2, counts=2)
    rng = random.Random(41)
    lines = [(f"k{i}", " ".join(rng.choices([f"w{n}" for n in range(30)], k=3)), BASE_MS + i * 700)
             for i in range(600)]
    stores = _expected(names, lines)
    expected = stores["counts"]
    assert expected == Counter(word for _, line, _ in lines for word in line.split())
    _produce(broker.bootstrap_servers, names["lines"], lines)
    app_id = f"iq-cluster-{uuid.uuid4().hex[:8]}"
    answers: list[tuple[str, int, dict]] = []
    stop = threading.Event()
    with SparkCluster(tmp_path_factory.mktemp("cluster"), workers=2, cores_per_worker=1) as cluster, \
            WordCountDriver(cluster, broker.bootstrap_servers, names, tmp_path, app_id, "realtime",
                            OVERRIDES, app=APP) as driver:
        url_file = tmp_path / f"state-{app_id}" / app_id / "query.url"
        driver.wait_until(lambda: url_file.exists() and caught_up(broker.bootstrap_servers, app_id,
                                                                  driver.partitions), 300, "caught up")
        base = url_file.read_text().strip()
        driver.wait_until(lambda: all(_get(f"{base}/stores/counts/keys/{w}")[0] == 200 for w in expected),
                          120, "every key answered")
        found = _ask_driver(driver)
        _assert_python_api(found, stores, app_id, base)
        _assert_http(base, stores, found)
        # the worker to lose runs active tasks of counts (a thread may run none: after a first batch
        # of one thread, the first keeps its share of the stateful tasks as parked, 0_0 and 0_1, and
        # the second gets both counts tasks); each has its standby on the other worker
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
