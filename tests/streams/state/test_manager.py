"""State manager: transactional write buffer, commit/abort, checkpoint file, restore from changelogs."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.errors import ProcessorStateError, TopologyError
from strom.kafka.serdes import Serdes
from strom.streams.state.context import ChangelogRecord
from strom.streams.state.manager import CHECKPOINT_DELTA, read_checkpoint, write_checkpoint
from strom.streams.state.stores import Stores
from strom.streams.state.timestamped import ValueAndTimestamp

from .store_host import StoreHost

SUPPLIERS = {"memory": Stores.in_memory_key_value_store, "rocksdb": Stores.persistent_key_value_store}


def kv_builder(kind, name="kv", caching=False):
    builder = Stores.key_value_store_builder(SUPPLIERS[kind](name), Serdes.String(), Serdes.Long())
    return builder.with_caching_enabled() if caching else builder


def inner(store):
    layer = store.wrapped
    while hasattr(layer, "wrapped"):
        layer = layer.wrapped
    return layer


@pytest.mark.parametrize("kind", SUPPLIERS)
def test_uncommitted_writes_are_visible_to_the_task_but_not_in_the_inner_store(host, kind):
    store = host.init(kv_builder(kind))
    store.put("a", 1)
    store.put("b", 2)
    store.delete("b")
    assert store.get("a") == 1 and list(store.all()) == [("a", 1)]
    assert inner(store).get(b"a") is None
    host.commit()
    assert inner(store).get(b"a") == Serdes.Long().serialize("t", 1)
    assert inner(store).committed_offset == 3, "three changelog records were written"
    store.close()


@pytest.mark.parametrize("kind", SUPPLIERS)
@pytest.mark.parametrize("caching", [False, True])
def test_abort_returns_the_store_to_its_last_commit(host, kind, caching):
    store = host.init(kv_builder(kind, caching=caching))
    store.put("a", 1)
    host.commit()
    store.put("a", 2)
    store.put("b", 3)
    if caching:
        host.manager.flush()  # part of the work may already have left the cache
        store.put("c", 4)
    host.manager.abort()
    assert list(store.all()) == [("a", 1)]
    assert store.get("c") is None
    assert host.manager.changelog_offsets() == {"kv": 1}
    store.close()


def test_rocksdb_commit_is_durable_and_uncommitted_writes_vanish_on_crash(make_host):
    first = make_host("run")
    store = first.init(kv_builder("rocksdb"))
    store.put("a", 1)
    first.commit()
    store.put("a", 2)
    store.put("b", 9)
    first.manager.close()  # a crash before commit: the buffer is lost
    second = make_host("run")
    store = second.init(kv_builder("rocksdb"))
    assert list(store.all()) == [("a", 1)]
    assert second.manager.changelog_offsets() == {"kv": 1}
    store.close()


def test_checkpoint_file_has_kafka_format_for_persistent_logged_stores(host):
    persistent = host.init(kv_builder("rocksdb", "disk"))
    memory = host.init(kv_builder("memory", "mem"))
    unlogged = host.init(kv_builder("rocksdb", "nolog").with_logging_disabled())
    for store in (persistent, memory, unlogged):
        store.put("x", 1)
    host.commit()
    assert host.manager.changelog_partitions() == {"disk": ("app-disk-changelog", 0),
                                                   "mem": ("app-mem-changelog", 0)}
    host.manager.close()  # a commit of one record leaves the file alone; closing writes it
    text = host.manager.checkpoint_path.read_text()
    assert text == "0\n1\napp-disk-changelog 0 1\n"
    assert read_checkpoint(host.manager.checkpoint_path) == {("app-disk-changelog", 0): 1}


def test_a_commit_rewrites_the_checkpoint_only_past_the_delta_and_close_always_does(host):
    store = host.init(kv_builder("rocksdb"))
    path = host.manager.checkpoint_path
    for i in range(CHECKPOINT_DELTA):
        store.put(f"k{i}", i)
    host.commit()
    assert read_checkpoint(path) == {}, "10,000 records are not more than the delta"
    store.put("one-more", 1)
    host.commit()
    assert read_checkpoint(path) == {("app-kv-changelog", 0): CHECKPOINT_DELTA + 1}
    store.put("a", 1)
    host.commit()
    assert read_checkpoint(path) == {("app-kv-changelog", 0): CHECKPOINT_DELTA + 1}
    host.manager.close()
    assert read_checkpoint(path) == {("app-kv-changelog", 0): CHECKPOINT_DELTA + 2}


CRASHING = """
import os, sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from streams.state.store_host import StoreHost
from streams.state.test_manager import kv_builder

host = StoreHost(Path({state_dir!r}))
store = host.init(kv_builder("rocksdb"))
for i in range({delta} + 1):
    store.put(f"k{{i}}", i)
host.commit()  # past the delta: the checkpoint file is written
for i in range(3):
    store.put(f"after-{{i}}", i)
    host.commit()  # each below the delta: the file stays behind the store
store.put("uncommitted", 0)
os._exit(0)  # a crash: nothing closed
"""


def test_a_crash_between_checkpoints_reopens_at_the_last_commit_not_at_the_checkpoint(tmp_path):
    tests = str(Path(__file__).resolve().parents[2])
    code = CRASHING.format(tests=tests, state_dir=str(tmp_path), delta=CHECKPOINT_DELTA)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    host = StoreHost(tmp_path)
    assert read_checkpoint(host.manager.checkpoint_path) == {("app-kv-changelog", 0): CHECKPOINT_DELTA + 1}
    store = host.init(kv_builder("rocksdb"))
    committed = CHECKPOINT_DELTA + 4
    assert host.manager.changelog_offsets() == {"kv": committed}, "restoration resumes after the last commit"
    expected = {**{f"k{i}": i for i in range(CHECKPOINT_DELTA + 1)}, **{f"after-{i}": i for i in range(3)}}
    assert dict(store.all()) == expected
    tail = [ChangelogRecord(b"after-0", Serdes.Long().serialize("t", 7), committed, 0)]
    assert host.manager.restore("kv", tail) == 1  # what another instance committed since
    assert store.get("after-0") == 7 and host.manager.changelog_offsets() == {"kv": committed + 1}
    host.manager.close()
    assert read_checkpoint(host.manager.checkpoint_path) == {("app-kv-changelog", 0): committed + 1}


def test_checkpoint_round_trip_and_corruption(tmp_path):
    path = tmp_path / ".checkpoint"
    assert read_checkpoint(path) == {}
    write_checkpoint(path, {("t", 3): 10, ("a", 0): 5})
    assert read_checkpoint(path) == {("a", 0): 5, ("t", 3): 10}
    path.write_text("0\n2\nt 3 10\n")
    with pytest.raises(ProcessorStateError, match="Corrupt checkpoint"):
        read_checkpoint(path)


def test_registering_a_store_name_twice_fails(host):
    host.init(kv_builder("memory"))
    with pytest.raises(TopologyError, match="registered twice"):
        host.init(kv_builder("memory"))


def test_restore_of_unknown_or_unlogged_store_fails(host):
    host.init(kv_builder("memory").with_logging_disabled())
    with pytest.raises(TopologyError, match="logging disabled"):
        host.manager.restore("kv", [])
    with pytest.raises(TopologyError, match="No store 'nope'"):
        host.manager.restore("nope", [])


def test_persistent_store_with_data_but_no_offset_is_wiped(make_host):
    first = make_host("run")
    store = first.init(kv_builder("rocksdb").with_logging_disabled())
    store.put("stale", 1)
    first.commit()
    first.manager.close()
    second = make_host("run")
    store = second.init(kv_builder("rocksdb"))  # now logged: its data cannot be trusted
    assert list(store.all()) == []
    store.close()


# --- changelog + restore reproduces the store ---------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["put", "delete", "commit"]), st.integers(0, 30),
                         st.integers(-5, 10**6)), max_size=120)


RUN = itertools.count()


def run_ops(host, store, ops):
    for i, (op, key, value) in enumerate(ops):
        host.at(1000 + i, offset=i)
        if op == "put":
            store.put(f"key-{key}", value)
        elif op == "delete":
            store.delete(f"key-{key}")
        else:
            host.commit()
    host.commit()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, kind=st.sampled_from(sorted(SUPPLIERS)), caching=st.booleans(),
       cache_bytes=st.sampled_from([0, 400, 10**7]))
def test_restoring_from_the_changelog_reproduces_the_store(make_host, ops, kind, caching, cache_bytes):
    name = f"run{next(RUN)}"
    source = make_host(name + "-src", cache_bytes=cache_bytes)
    store = source.init(kv_builder(kind, caching=caching))
    run_ops(source, store, ops)
    expected = list(store.all())
    changelog = source.changelogs.get("kv", [])
    store.close()

    target = make_host(name + "-dst")
    restored = target.init(kv_builder(kind))
    assert target.manager.changelog_offsets() == {"kv": None}
    assert target.manager.restore("kv", changelog) == len(changelog)
    assert list(restored.all()) == expected
    assert target.manager.changelog_offsets() == {"kv": len(changelog) or None}
    restored.close()


def test_restore_resumes_from_the_committed_offset(make_host):
    source = make_host("src")
    store = source.init(kv_builder("rocksdb"))
    for i in range(50):
        store.put(f"k{i % 7}", i)
    source.commit()
    changelog = source.changelogs["kv"]

    target = make_host("dst")
    restored = target.init(kv_builder("rocksdb"))
    target.manager.restore("kv", changelog[:20])
    target.manager.close()
    target = make_host("dst")
    restored = target.init(kv_builder("rocksdb"))
    start = target.manager.changelog_offsets()["kv"]
    assert start == 20
    target.manager.restore("kv", [tuple(r) for r in changelog[start:]])
    assert list(restored.all()) == list(store.all())
    store.close()
    restored.close()


def test_timestamped_store_changelog_has_kafka_layout_and_restores_timestamps(make_host):
    builder = lambda: Stores.timestamped_key_value_store_builder(  # noqa: E731
        Stores.persistent_timestamped_key_value_store("ts"), Serdes.String(), Serdes.String())
    source = make_host("src")
    store = source.init(builder())
    store.put("a", ValueAndTimestamp.make("x", 111))
    store.put("b", ValueAndTimestamp.make("y", 222))
    store.delete("b")
    source.commit()
    assert source.changelogs["ts"][:2] == [ChangelogRecord(b"a", b"x", 0, 111),
                                           ChangelogRecord(b"b", b"y", 1, 222)]
    target = make_host("dst")
    restored = target.init(builder())
    target.manager.restore("ts", source.changelogs["ts"])
    assert list(restored.all()) == [("a", ValueAndTimestamp("x", 111))]
    store.close()
    restored.close()


def test_catching_up_from_the_changelog_replaces_cached_values(make_host):
    """A task that ran elsewhere meanwhile: its local store restores the changelog tail between
    commits, and values cached before must not shadow the restored ones."""
    here = make_host("here")
    store = here.init(kv_builder("rocksdb", caching=True))
    store.set_flush_listener(lambda *change: None, False)
    store.put("a", 1)
    here.commit()
    assert store.get("a") == 1  # now cached as a clean entry
    elsewhere = [ChangelogRecord(b"a", Serdes.Long().serialize("t", 7), 1, 50),
                 ChangelogRecord(b"b", Serdes.Long().serialize("t", 8), 2, 51)]
    assert here.manager.restore("kv", elsewhere) == 2
    assert list(store.all()) == [("a", 7), ("b", 8)]
    assert store.get("a") == 7
    assert here.manager.changelog_offsets() == {"kv": 3}
    store.put("c", 1)
    with pytest.raises(RuntimeError, match="unflushed"):
        here.manager.restore("kv", elsewhere)
    store.close()


TXN_OPS = st.lists(st.tuples(st.sampled_from(["put", "put", "delete", "flush", "commit", "abort", "check"]),
                             st.integers(0, 9), st.integers(0, 50)), max_size=60)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=TXN_OPS, kind=st.sampled_from(sorted(SUPPLIERS)), caching=st.booleans(),
       cache_bytes=st.sampled_from([0, 300, 10**7]))
def test_commit_and_abort_match_a_transactional_model(make_host, ops, kind, caching, cache_bytes):
    name = f"txn{next(RUN)}"
    host = make_host(name, cache_bytes=cache_bytes)
    store = host.init(kv_builder(kind, caching=caching))
    committed: dict[str, int] = {}
    current: dict[str, int] = {}
    for op, key, value in ops:
        if op == "put":
            store.put(f"k{key}", value)
            current[f"k{key}"] = value
        elif op == "delete":
            assert store.delete(f"k{key}") == current.pop(f"k{key}", None)
        elif op == "flush":
            host.manager.flush()
        elif op == "commit":
            host.commit()
            committed = dict(current)
        elif op == "abort":
            host.manager.abort()
            current = dict(committed)
        else:
            assert dict(store.all()) == current
            assert store.get(f"k{key}") == current.get(f"k{key}")
            low, high = sorted((f"k{key}", f"k{value % 10}"))
            in_range = sorted((k, v) for k, v in current.items() if low <= k <= high)
            assert list(store.range(low, high)) == in_range
            assert list(store.reverse_range(low, high)) == in_range[::-1]
    assert dict(store.all()) == current
    host.manager.close()
    if kind == "rocksdb":  # reopened after a crash: exactly the last commit
        reopened = make_host(name).init(kv_builder(kind))
        assert dict(reopened.all()) == committed
        reopened.close()
