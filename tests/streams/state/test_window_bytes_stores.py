"""The inner window and session stores: one suite over in-memory and RocksDB segments."""

import pytest

from strom.streams.state.context import ChangelogRecord
from strom.streams.state.window import schemas
from strom.streams.state.window.bytes_stores import SessionBytesStore, WindowBytesStore

BACKENDS = ["memory", "rocksdb"]


@pytest.fixture(params=BACKENDS)
def window_store(request, tmp_path):
    store = WindowBytesStore("w", retention_ms=100, window_size_ms=10, retain_duplicates=False,
                             persistent=request.param == "rocksdb", segment_interval_ms=20)
    store.open(str(tmp_path))
    yield store
    store.close()


@pytest.fixture(params=BACKENDS)
def session_store(request, tmp_path):
    store = SessionBytesStore("s", retention_ms=100, persistent=request.param == "rocksdb",
                              segment_interval_ms=20)
    store.open(str(tmp_path))
    yield store
    store.close()


def test_window_put_fetch_and_delete(window_store):
    window_store.put(b"a", b"1", 0)
    window_store.put(b"a", b"2", 10)
    window_store.put(b"ab", b"x", 10)
    window_store.put(b"b", b"3", 10)
    assert window_store.fetch(b"a", 10) == b"2"
    assert list(window_store.fetch_range(b"a", 0, 50)) == [(0, b"1"), (10, b"2")]
    assert list(window_store.fetch_range(b"a", 0, 50, reverse=True)) == [(10, b"2"), (0, b"1")]
    assert list(window_store.fetch_range(b"a", 5, 10)) == [(10, b"2")]
    window_store.put(b"a", None, 0)
    assert window_store.fetch(b"a", 0) is None
    assert list(window_store.fetch_key_range(b"a", b"ab", 0, 50)) == [(b"a", 10, b"2"), (b"ab", 10, b"x")]
    assert [(k, t) for k, t, _ in window_store.all()] == [(b"a", 10), (b"ab", 10), (b"b", 10)]


def test_window_retention_drops_expired_segments_and_records(window_store):
    window_store.put(b"k", b"old", 5)
    window_store.put(b"k", b"mid", 60)
    window_store.put(b"k", b"new", 120)   # stream time 120, retention 100: windows <= 20 expire
    assert window_store.fetch(b"k", 5) is None
    assert list(window_store.fetch_range(b"k", 0, 200)) == [(60, b"mid"), (120, b"new")]
    assert window_store.put(b"k", b"late", 20) is None
    assert window_store.expired_records == 1
    assert list(window_store.fetch_range(b"k", 0, 200)) == [(60, b"mid"), (120, b"new")]


def test_retained_duplicates_keep_every_put(tmp_path):
    store = WindowBytesStore("d", 100, 10, retain_duplicates=True, persistent=False)
    store.open(None)
    store.put(b"k", b"1", 7)
    store.put(b"k", b"2", 7)
    assert store.put(b"k", None, 7) is None
    assert list(store.fetch_range(b"k", 0, 10)) == [(7, b"1"), (7, b"2")]


def test_rocksdb_window_store_reopens_from_disk(tmp_path):
    store = WindowBytesStore("p", 1_000, 10, False, persistent=True)
    store.open(str(tmp_path))
    store.put(b"k", b"v", 300)
    store.commit(7)
    store.put(b"k", b"uncommitted", 310)
    store.close()
    reopened = WindowBytesStore("p", 1_000, 10, False, persistent=True)
    reopened.open(str(tmp_path))
    assert reopened.fetch(b"k", 300) == b"v"
    assert reopened.fetch(b"k", 310) is None
    assert reopened.committed_offset == 7
    assert reopened.observed_stream_time == 300  # retention keeps counting from where it was
    reopened.close()


def test_find_sessions_by_end_and_start(session_store):
    session_store.put(b"a", 0, 10, b"s1")
    session_store.put(b"a", 20, 30, b"s2")
    session_store.put(b"a", 40, 40, b"s3")
    session_store.put(b"aa", 20, 25, b"x")
    found = [(s, e, v) for _, s, e, v in session_store.find_sessions(b"a", b"a", 10, 35)]
    assert found == [(0, 10, b"s1"), (20, 30, b"s2")]
    found_back = [(s, e) for _, s, e, _ in session_store.find_sessions(b"a", b"a", 0, 100, reverse=True)]
    assert found_back == [(40, 40), (20, 30), (0, 10)]
    assert session_store.fetch_session(b"a", 20, 30) == b"s2"
    session_store.put(b"a", 20, 30, None)
    assert session_store.fetch_session(b"a", 20, 30) is None
    keys = [k for k, *_ in session_store.find_sessions(b"a", b"b", 0, 100)]
    assert sorted(keys) == [b"a", b"a", b"aa"]


def test_sessions_expire_by_end_time(session_store):
    session_store.put(b"k", 0, 5, b"old")
    session_store.put(b"k", 150, 160, b"new")
    assert [v for *_, v in session_store.find_sessions(b"k", b"k", 0, 1_000)] == [b"new"]
    assert session_store.put(b"k", 50, 59, b"late") is None
    # ending exactly retention before stream time: kept (with gap + grace as retention, not closed yet)
    assert session_store.put(b"k", 50, 60, b"edge") is not None


@pytest.mark.parametrize("commit_first", [False, True])
def test_pending_writes_merge_with_committed_ones(window_store, commit_first):
    window_store.put(b"k", b"1", 10)
    window_store.put(b"k", b"2", 30)
    if commit_first:
        window_store.commit(None)
    window_store.put(b"k", None, 10)
    window_store.put(b"k", b"3", 50)
    window_store.put(b"j", b"x", 30)
    assert list(window_store.fetch_range(b"k", 0, 100)) == [(30, b"2"), (50, b"3")]
    assert list(window_store.fetch_range(b"k", 0, 100, reverse=True)) == [(50, b"3"), (30, b"2")]
    window_store.commit(None)
    assert list(window_store.fetch_range(b"k", 0, 100)) == [(30, b"2"), (50, b"3")]


def test_abort_drops_uncommitted_writes(window_store):
    window_store.put(b"k", b"kept", 10)
    window_store.commit(3)
    window_store.put(b"k", b"dropped", 20)
    window_store.put(b"k", None, 10)
    window_store.abort()
    assert list(window_store.fetch_range(b"k", 0, 100)) == [(10, b"kept")]
    assert window_store.committed_offset == 3


def test_restore_replays_changelog_records_and_wipe_clears(window_store):
    records = [ChangelogRecord(schemas.window_store_key(b"k", t), str(t).encode(), offset, t)
               for offset, t in enumerate([0, 10, 20])]
    records.append(ChangelogRecord(schemas.window_store_key(b"k", 10), None, 3, 10))
    window_store.restore(records)
    assert list(window_store.fetch_range(b"k", 0, 100)) == [(0, b"0"), (20, b"20")]
    assert window_store.committed_offset == 4
    window_store.wipe()
    assert list(window_store.all()) == []
    assert window_store.committed_offset is None


def test_reads_hide_windows_expired_by_retention_within_a_live_segment(window_store):
    # retention 100: at stream time 100 the window starting at 0 has expired, though its segment lives
    window_store.put(b"k", b"old", 0)
    window_store.put(b"k", b"new", 100)
    assert list(window_store.fetch_range(b"k", 0, 200)) == [(100, b"new")]
    assert [start for _, start, _ in window_store.all()] == [100]
    assert window_store.fetch(b"k", 0) is None


def test_reads_hide_sessions_expired_by_retention(session_store):
    # retention 100: at stream time 101 the session ending at 0 has expired (at 100 it had not: an
    # inclusive end exactly retention old may still be joined by a record within the gap)
    session_store.put(b"k", 0, 0, b"old")
    session_store.put(b"k", 100, 100, b"new")
    def sessions():
        return [(s, e) for _, s, e, _ in session_store.find_sessions(None, None, 0, 1_000)]

    assert sessions() == [(0, 0), (100, 100)]
    session_store.put(b"k", 101, 101, b"newer")
    assert sessions() == [(100, 100), (101, 101)]
