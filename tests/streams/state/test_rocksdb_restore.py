"""A RocksDB store restoring in bulk: compactions wait while level 0 is small, and come back at the bound
or with the first write after the restore; the data and offset are those written either way."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from strom.streams.state import rocksdb
from strom.streams.state.rocksdb import RocksDBStore


@pytest.fixture
def store(tmp_path):
    store = RocksDBStore("kv")
    store.init(SimpleNamespace(state_dir=tmp_path), store)
    yield store
    store.close()


def _restore_flushed(store: RocksDBStore, batch: int) -> None:
    """One restore batch, then its write buffer flushed: one more level-0 file."""
    store.restore_batch([(b"key-%d-%d" % (batch, i), b"v%d" % i) for i in range(100)], (batch + 1) * 100)
    store._live().flush()


def _level0(store: RocksDBStore) -> int:
    return store._live().property_int_value("rocksdb.num-files-at-level0")


def _wait_for_compaction(store: RocksDBStore, below: int) -> None:
    deadline = time.monotonic() + 60
    while _level0(store) >= below:
        assert time.monotonic() < deadline, f"level 0 still holds {_level0(store)} files"
        time.sleep(0.05)


def test_a_restore_keeps_level0_files_until_the_bound_then_compacts(store, monkeypatch):
    monkeypatch.setattr(rocksdb, "RESTORE_LEVEL0_FILES", 6)
    for batch in range(6):
        _restore_flushed(store, batch)
    time.sleep(0.5)  # a compaction, were it allowed, would have started (RocksDB's trigger is 4 files)
    assert _level0(store) == 6
    _restore_flushed(store, 6)  # the batch finds 6 files: compactions resume
    _wait_for_compaction(store, 4)
    assert store.committed_offset == 700
    assert sum(1 for _ in store.all()) == 700


def test_the_first_write_after_a_restore_turns_compactions_back_on(store):
    for batch in range(5):
        _restore_flushed(store, batch)
    time.sleep(0.5)
    assert _level0(store) == 5
    store.write_batch([(b"key-0-0", b"new"), (b"key-0-1", None)], 501)
    _wait_for_compaction(store, 4)
    assert store.get(b"key-0-0") == b"new" and store.get(b"key-0-1") is None
    assert store.committed_offset == 501
    assert sum(1 for _ in store.all()) == 499


# --- crash safety of restores written without the write-ahead log --------------------------------

RECORDS, KEYS, BATCH = 600_000, 100_000, 5_000
CHILD = """
import sys, time
from types import SimpleNamespace
sys.path.insert(0, {tests!r})
from streams.state.test_rocksdb_restore import changelog_batch
from strom.streams.state.rocksdb import RocksDBStore

store = RocksDBStore("kv")
store.init(SimpleNamespace(state_dir={state_dir!r}), store)
offset = store.committed_offset or 0
while offset < {records}:
    end = min(offset + {batch}, {records})
    store.restore_batch(changelog_batch(offset, end), end)
    offset = end
    print(offset, flush=True)
if {commit}:
    store.write_batch([(b"committed", b"yes")], offset + 1)  # a commit right after the restore
    print("committed", flush=True)
time.sleep(600)
"""


def changelog_batch(start: int, end: int) -> list[tuple[bytes, bytes | None]]:
    """Changelog records ``start`` to ``end``: 100k keys, every 13th record a tombstone, values naming
    their offset (so a store's contents tell which records it holds)."""
    return [(b"k%06d" % (o % KEYS), None if o % 13 == 0 else b"%d|" % o + b"x" * 100)
            for o in range(start, end)]


def _state_at(offset: int) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for key, value in changelog_batch(0, offset):
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def _killed_child(tmp_path, until: str, commit: bool) -> None:
    """Runs CHILD until it prints ``until``, then kills it with SIGKILL (no close, no flush)."""
    tests = str(Path(__file__).resolve().parents[2])
    code = CHILD.format(tests=tests, state_dir=str(tmp_path), records=RECORDS, batch=BATCH, commit=commit)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:
            if line.strip() == until:
                break
        else:
            pytest.fail(f"the child ended before {until}: exit code {child.wait()}")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def _contents(store: RocksDBStore) -> dict[bytes, bytes]:
    return dict(store.all())


@pytest.mark.slow
def test_a_restore_killed_midway_reopens_at_a_consistent_offset_and_restores_to_the_exact_state(tmp_path):
    _killed_child(tmp_path, str(RECORDS * 3 // 4 // BATCH * BATCH), commit=False)  # several flushes done
    store = RocksDBStore("kv")
    store.init(SimpleNamespace(state_dir=tmp_path), store)
    try:
        offset = store.committed_offset
        assert offset is not None and 0 < offset < RECORDS  # flushed part of the restore, not all of it
        assert _contents(store) == _state_at(offset)
        for start in range(offset, RECORDS, BATCH):
            end = min(start + BATCH, RECORDS)
            store.restore_batch(changelog_batch(start, end), end)
        assert store.committed_offset == RECORDS
        assert _contents(store) == _state_at(RECORDS)
    finally:
        store.close()


@pytest.mark.slow
def test_a_commit_right_after_a_restore_keeps_everything_the_restore_wrote(tmp_path):
    _killed_child(tmp_path, "committed", commit=True)
    store = RocksDBStore("kv")
    store.init(SimpleNamespace(state_dir=tmp_path), store)
    try:
        assert store.committed_offset == RECORDS + 1
        assert _contents(store) == {**_state_at(RECORDS), b"committed": b"yes"}
    finally:
        store.close()
