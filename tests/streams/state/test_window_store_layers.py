"""Window and session stores through their layers: metered -> caching -> change-logging -> inner."""

import pytest

from strom.kafka.serdes import Serdes
from strom.streams.kstream.windows import SessionWindow, Window, Windowed
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.window import builders

from .store_host import StoreHost


def _window_store(tmp_path, persistent, cached, timestamped=False, name="counts"):
    factory = {(True, False): builders.persistent_window_store,
               (True, True): builders.persistent_timestamped_window_store,
               (False, False): builders.in_memory_window_store,
               (False, True): builders.in_memory_timestamped_window_store}[(persistent, timestamped)]
    builder = builders.window_store_builder(factory(name, 1_000, 100), Serdes.String(), Serdes.Long())
    if cached:
        builder.with_caching_enabled()
    host = StoreHost(tmp_path)
    return host.init(builder), host


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("cached", [False, True])
def test_window_store_reads_its_writes_and_logs_them(tmp_path, persistent, cached):
    store, context = _window_store(tmp_path, persistent, cached)
    context.at(5)
    store.put("a", 1, 0)
    store.put("a", 2, 0)
    store.put("a", 7, 100)
    store.put("b", 3, 0)
    assert store.fetch("a", 0) == 2
    assert list(store.fetch_range("a", 0, 100)) == [(0, 2), (100, 7)]
    assert list(store.backward_fetch_range("a", 0, 100)) == [(100, 7), (0, 2)]
    assert list(store.fetch_all(0, 0)) == [(Windowed("a", Window(0, 100)), 2),
                                           (Windowed("b", Window(0, 100)), 3)]
    store.flush()
    # the cache collapses the two writes of ("a", 0) into one changelog record
    assert len(context.changelogs["counts"]) == (3 if cached else 4)
    context.commit()
    assert [(w.key, w.window.start) for w, _ in store.all()] == [("a", 0), ("a", 100), ("b", 0)]
    store.close()


def test_cached_window_store_forwards_windowed_changes_on_flush(tmp_path):
    store, context = _window_store(tmp_path, False, True, timestamped=True)
    flushed = []
    assert store.set_flush_listener(lambda *change: flushed.append(change), True)
    context.at(10)
    store.put("k", ValueAndTimestamp(1, 10), 0)
    context.at(20)
    store.put("k", ValueAndTimestamp(2, 20), 0)
    assert flushed == []
    store.flush()
    assert flushed == [(Windowed("k", Window(0, 100)), 2, None, 20)]
    context.at(30)
    store.put("k", ValueAndTimestamp(3, 30), 0)
    store.flush()
    assert flushed[-1] == (Windowed("k", Window(0, 100)), 3, 2, 30)
    assert store.fetch("k", 0) == ValueAndTimestamp(3, 30)


@pytest.mark.parametrize("persistent", [False, True])
def test_window_store_restores_from_its_changelog(tmp_path, persistent):
    store, context = _window_store(tmp_path / "a", persistent, True, timestamped=True)
    for timestamp in (10, 150, 170, 420):
        context.at(timestamp)
        store.put(f"k{timestamp % 3}", ValueAndTimestamp(timestamp, timestamp), timestamp // 100 * 100)
    store.flush()
    expected = list(store.all())
    restored, restored_context = _window_store(tmp_path / "b", persistent, True, timestamped=True)
    restored_context.manager.restore("counts", context.changelogs["counts"])
    assert list(restored.all()) == expected
    assert restored_context.manager.changelog_offsets() == {"counts": len(context.changelogs["counts"])}


@pytest.mark.parametrize("persistent", [False, True])
def test_session_store_layers_and_restore(tmp_path, persistent):
    factory = builders.persistent_session_store if persistent else builders.in_memory_session_store
    context = StoreHost(tmp_path / "a")
    store = context.init(builders.session_store_builder(factory("sessions", 1_000), Serdes.String(),
                                                        Serdes.Long()))
    context.at(10)
    store.put(Windowed("u", SessionWindow(0, 10)), 2)
    store.put(Windowed("u", SessionWindow(50, 60)), 1)
    store.put(Windowed("v", SessionWindow(5, 5)), 1)
    store.remove(Windowed("u", SessionWindow(0, 10)))
    assert list(store.fetch("u")) == [(Windowed("u", SessionWindow(50, 60)), 1)]
    assert list(store.find_sessions("v", 0, 100)) == [(Windowed("v", SessionWindow(5, 5)), 1)]
    assert store.fetch_session("u", 50, 60) == 1
    assert not store.set_flush_listener(lambda *change: None, False)
    assert [(r.key[:1], r.value) for r in context.changelogs["sessions"]] == [(b"u", b"\0" * 7 + b"\2"),
                                                                 (b"u", b"\0" * 7 + b"\1"),
                                                                 (b"v", b"\0" * 7 + b"\1"), (b"u", None)]
    restored_context = StoreHost(tmp_path / "b")
    restored = restored_context.init(
        builders.session_store_builder(factory("sessions", 1_000), Serdes.String(), Serdes.Long()))
    restored_context.manager.restore("sessions", context.changelogs["sessions"])
    assert list(restored.find_sessions_key_range(None, None, 0, 100)) == \
        list(store.find_sessions_key_range(None, None, 0, 100))


def test_windowed_changelogs_are_compacted_and_time_deleted():
    builder = builders.window_store_builder(builders.persistent_window_store("w", 1_000, 100))
    assert builder.log_config == {"cleanup.policy": "compact,delete", "retention.ms": str(1_000 + 86_400_000)}
    builder.with_logging_enabled({"retention.ms": "5000", "min.insync.replicas": "1"})
    assert builder.log_config["retention.ms"] == "5000"
    assert builder.log_config["cleanup.policy"] == "compact,delete"
    session = builders.session_store_builder(builders.in_memory_session_store("s", 10))
    assert session.log_config["retention.ms"] == str(10 + 86_400_000)


@pytest.mark.parametrize("cached", [False, True])
def test_timestamped_window_store_reports_values_of_the_wrong_type(tmp_path, cached):
    from strom.errors import SerializationError

    store, context = _window_store(tmp_path, False, cached, timestamped=True)
    context.at(5)
    with pytest.raises(SerializationError, match="ValueAndTimestamp"):
        store.put("a", 3, 0)
    with pytest.raises(SerializationError):
        store.put("a", ValueAndTimestamp("not a number", 5), 0)
    store.put("a", ValueAndTimestamp(3, 5), 0)
    assert store.fetch("a", 0) == ValueAndTimestamp(3, 5)
    store.put("a", None, 0)
    assert store.fetch("a", 0) is None
    store.close()
