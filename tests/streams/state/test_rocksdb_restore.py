"""A RocksDB store restoring in bulk: compactions wait while level 0 is small, and come back at the bound
or with the first write after the restore; the data and offset are those written either way."""

from __future__ import annotations

import time
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
