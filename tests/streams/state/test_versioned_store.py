"""Versioned key-value stores (KIP-889): answers as of a timestamp, return codes, history retention,
changelog and restoration, transactions; checked against a plain model of the history."""

from __future__ import annotations

import bisect
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.errors import TopologyError, VersionedTimestampError
from strom.kafka.serdes import Serdes
from strom.streams.state.stores import Stores
from strom.streams.state.versioned import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    VersionedRecord,
)

RETENTION = 30


def builder(logging: bool = True, retention: int = RETENTION):
    supplier = Stores.persistent_versioned_key_value_store("versions", retention)
    built = Stores.versioned_key_value_store_builder(supplier, Serdes.String(), Serdes.Long())
    return built if logging else built.with_logging_disabled()


def _inner(store):
    """The RocksDB store under the layers (metered -> [change-logging] -> history -> transaction)."""
    while hasattr(store, "wrapped"):
        store = store.wrapped
    return store


@pytest.fixture
def store(host):
    store = host.init(builder())
    yield store
    store.close()


def test_get_answers_as_of_any_time_within_the_history(store):
    assert store.put("a", 1, 10) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.put("a", 2, 20) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.get("a") == VersionedRecord(2, 20, None)
    assert store.get("a", 9) is None
    assert store.get("a", 10) == VersionedRecord(1, 10, 20)
    assert store.get("a", 19) == VersionedRecord(1, 10, 20)
    assert store.get("a", 20) == VersionedRecord(2, 20, None)
    assert store.get("a", 1000) == VersionedRecord(2, 20, None)
    assert store.get("b") is None


def test_an_out_of_order_put_returns_when_it_stops_being_valid(store):
    store.put("a", 1, 10)
    store.put("a", 3, 30)
    assert store.put("a", 2, 20) == 30
    assert store.get("a", 25) == VersionedRecord(2, 20, 30)
    assert store.get("a", 15) == VersionedRecord(1, 10, 20)
    assert store.get("a") == VersionedRecord(3, 30, None)


def test_same_timestamp_replaces_the_version(store):
    store.put("a", 1, 10)
    store.put("a", 5, 20)
    assert store.put("a", 2, 10) == 20
    assert store.get("a", 10) == VersionedRecord(2, 10, 20)


def test_tombstones_end_a_value_and_delete_returns_what_was_valid(store):
    store.put("a", 1, 10)
    assert store.delete("a", 20) == VersionedRecord(1, 10, None)
    assert store.get("a") is None
    assert store.get("a", 15) == VersionedRecord(1, 10, 20)
    assert store.delete("a", 25) is None
    assert store.put("a", None, 30) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.put("a", 7, 40) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.get("a") == VersionedRecord(7, 40, None)


@pytest.mark.parametrize("history", [[], [(1, 0), (None, 5)]], ids=["alone", "after-a-gap"])
def test_a_tombstone_replacing_the_latest_value_keeps_the_key_deleted(store, history):
    """A delete at the latest value's own timestamp stays a delete: an older write coming later goes into
    the history and does not become the latest (Kafka Streams 4.1.1 loses this delete; docs/streams.md)."""
    for value, ts in [*history, (7, 7)]:
        store.put("a", value, ts)
    assert store.put("a", None, 7) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.put("a", 6, 6) == 7
    assert store.get("a") is None
    assert store.get("a", 7) is None
    assert store.get("a", 6) == VersionedRecord(6, 6, 7)


def test_writes_and_reads_older_than_the_retention_are_refused(store, host):
    store.put("a", 1, 100)
    assert store.put("a", 0, 100 - RETENTION - 1) == PUT_RETURN_CODE_NOT_PUT
    assert store.put("b", 0, 100 - RETENTION) == PUT_RETURN_CODE_VALID_TO_UNDEFINED  # just within it
    assert store.get("b", 100 - RETENTION) == VersionedRecord(0, 100 - RETENTION, None)
    assert store.get("a", 100 - RETENTION - 1) is None
    assert store.delete("a", 10) is None
    assert [r.timestamp for r in host.changelogs["versions"]] == [100, 100 - RETENTION]


def test_the_latest_version_answers_as_of_times_older_than_the_history(store):
    store.put("a", 1, 10)
    store.put("a", 2, 20)
    store.put("b", 5, 100)
    assert store.get("a", 25) == VersionedRecord(2, 20, None)  # 25 < 100 - RETENTION: as Kafka's store
    assert store.get("a", 15) is None  # the older version is out of the history
    store.delete("a", 80)
    assert store.get("a", 25) is None


def test_versions_past_the_retention_are_dropped_from_disk(host):
    store = host.init(builder(logging=False))
    for ts in range(0, 100):
        store.put("a", ts, ts)
    host.commit()
    inner = _inner(store)
    versions = sum(1 for key, _ in inner.all() if key.startswith(b"v"))
    assert versions == RETENTION + 1  # those valid at 69..99: from 69 on
    assert store.get("a", 99 - RETENTION) == VersionedRecord(99 - RETENTION, 99 - RETENTION, 100 - RETENTION)
    store.close()


def test_deleted_keys_leave_nothing_once_out_of_the_history(host):
    store = host.init(builder(logging=False))
    for i in range(50):
        store.put(f"k{i}", i, i)
        store.delete(f"k{i}", i + 1)
    store.put("alive", 1, 100)
    host.commit()
    inner = _inner(store)
    assert sorted(key for key, _ in inner.all() if not key.startswith(b"t")) == [
        b"v" + len(b"alive").to_bytes(4, "big") + b"alive" + (100 + 2**63).to_bytes(8, "big")]
    assert store.get("k49", 100 - RETENTION) is None and store.get("alive") == VersionedRecord(1, 100, None)
    store.close()


def test_abort_drops_uncommitted_versions_and_the_stream_time(host):
    store = host.init(builder())
    store.put("a", 1, 10)
    host.commit()
    store.put("a", 2, 1000)
    host.manager.abort()
    assert store.get("a") == VersionedRecord(1, 10, None)
    assert store.put("a", 3, 20) == PUT_RETURN_CODE_VALID_TO_UNDEFINED  # 1000 never became stream time
    store.close()


def test_caching_and_wrong_suppliers_are_refused_with_a_way_out():
    with pytest.raises(TopologyError, match="cannot be cached"):
        builder().with_caching_enabled()
    with pytest.raises(TopologyError, match="persistent_versioned_key_value_store"):
        Stores.versioned_key_value_store_builder(Stores.persistent_key_value_store("kv"), None, None)


def test_timestamps_must_be_whole_milliseconds(store):
    with pytest.raises(VersionedTimestampError, match="whole milliseconds"):
        store.put("a", 1, 1.5)


def test_changelog_uses_kafkas_compaction_lag():
    assert builder().log_config == {"min.compaction.lag.ms": str(RETENTION + 24 * 3600 * 1000)}
    assert builder().with_logging_enabled({"segment.ms": "1000"}).log_config == {
        "min.compaction.lag.ms": str(RETENTION + 24 * 3600 * 1000), "segment.ms": "1000"}


class Model:
    """The history as a reader sees it: sorted versions per key, the observed stream time."""

    def __init__(self) -> None:
        self.versions: dict[str, dict[int, int | None]] = {}
        self.stream_time: int | None = None

    def too_old(self, timestamp: int) -> bool:
        return self.stream_time is not None and timestamp < self.stream_time - RETENTION

    def put(self, key: str, value: int | None, timestamp: int) -> int:
        if self.too_old(timestamp):
            return PUT_RETURN_CODE_NOT_PUT
        self.versions.setdefault(key, {})[timestamp] = value
        self.stream_time = timestamp if self.stream_time is None else max(self.stream_time, timestamp)
        later = [t for t in self.versions[key] if t > timestamp]
        return min(later) if later else PUT_RETURN_CODE_VALID_TO_UNDEFINED

    def get(self, key: str, as_of: int) -> VersionedRecord | None:
        times = sorted(self.versions.get(key, {}))
        i = bisect.bisect_right(times, as_of)
        if i == 0 or self.versions[key][times[i - 1]] is None:
            return None
        valid_to = times[i] if i < len(times) else None
        if self.too_old(as_of) and valid_to is not None:  # only the latest version outlives the history
            return None
        return VersionedRecord(self.versions[key][times[i - 1]], times[i - 1], valid_to)


KEYS = ["a", "b", "ab"]
writes = st.lists(st.tuples(st.sampled_from(KEYS), st.none() | st.integers(0, 9), st.integers(0, 120)),
                  max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=writes, commit_every=st.integers(1, 10))
def test_store_and_its_restored_copy_answer_as_the_model(make_host, writes, commit_every):
    run = uuid.uuid4().hex  # each example its own RocksDB directories
    host = make_host(f"live-{run}")
    store = host.init(builder())
    model = Model()
    for i, (key, value, timestamp) in enumerate(writes):
        assert store.put(key, value, timestamp) == model.put(key, value, timestamp)
        if i % commit_every == 0:
            host.commit()
    host.commit()
    restored_host = make_host(f"restored-{run}")
    restored = restored_host.init(builder())
    restored_host.manager.restore("versions", host.changelogs.get("versions", []))
    for key in KEYS:
        for as_of in range(-1, 122, 3):
            expected = model.get(key, as_of)
            assert store.get(key, as_of) == expected, (key, as_of)
            assert restored.get(key, as_of) == expected, (key, as_of)
        latest = model.get(key, 10**9)
        assert store.get(key) == (None if latest is None else latest._replace(valid_to=None))
    _assert_only_needed_versions_kept(store, model)
    store.close()
    restored.close()


def _assert_only_needed_versions_kept(store, model: Model) -> None:
    """No version stays on disk that no valid query can reach (a version whose validity ended before the
    oldest valid query; a latest tombstone older than it), up to the last stream-time advance."""
    if model.stream_time is None:
        return
    oldest = model.stream_time - RETENTION
    inner = _inner(store)
    for key, raw in inner.all():
        if not key.startswith(b"v"):
            continue
        timestamp = int.from_bytes(key[-8:], "big") - 2**63
        valid_to = int.from_bytes(raw[:8], "big", signed=True)
        if valid_to != 2**63 - 1:
            assert valid_to >= oldest, (key, valid_to, oldest)
        elif raw[8:9] == b"\x00":
            assert timestamp >= oldest, (key, timestamp, oldest)
