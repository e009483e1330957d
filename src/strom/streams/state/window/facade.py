"""A plain-value view of a timestamped window store, as Kafka's TopologyTestDriver.getWindowStore gives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strom.streams.kstream.windows import Windowed
from strom.streams.state.internals.metered import MeteredWindowStore
from strom.streams.state.internals.timestamps import NO_TIMESTAMP
from strom.streams.state.timestamped import ValueAndTimestamp
from strom.streams.state.window.reads import WindowFetches


def window_store_view(store: Any) -> Any:
    """The store itself, or a plain-value facade when it holds ValueAndTimestamp values."""
    if isinstance(store, MeteredWindowStore) and store.timestamped:
        return WindowStoreFacade(store)
    return store


def _plain(value: ValueAndTimestamp[Any] | None) -> Any:
    return None if value is None else value.value


class WindowStoreFacade(WindowFetches):
    def __init__(self, store: MeteredWindowStore) -> None:
        self.store = store

    @property
    def name(self) -> str:
        return self.store.name

    def put(self, key: Any, value: Any, window_start: int) -> None:
        self.store.put(key, ValueAndTimestamp.make(value, NO_TIMESTAMP), window_start)

    def fetch(self, key: Any, window_start: int, *more: Any) -> Any:
        if more:
            return self.fetch_more(key, window_start, more)
        return _plain(self.store.fetch(key, window_start))

    def fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        return ((start, _plain(v)) for start, v in self.store.fetch_range(key, time_from, time_to))

    def backward_fetch_range(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        return ((start, _plain(v)) for start, v in self.store.backward_fetch_range(key, time_from, time_to))

    def fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                        time_to: int) -> Iterator[tuple[Windowed[Any], Any]]:
        return ((w, _plain(v)) for w, v in self.store.fetch_key_range(key_from, key_to, time_from, time_to))

    def backward_fetch_key_range(self, key_from: Any, key_to: Any, time_from: int,
                                 time_to: int) -> Iterator[tuple[Windowed[Any], Any]]:
        return ((w, _plain(v)) for w, v in self.store.backward_fetch_key_range(key_from, key_to, time_from,
                                                                                 time_to))

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed[Any], Any]]:
        return ((w, _plain(v)) for w, v in self.store.fetch_all(time_from, time_to))

    def all(self) -> Iterator[tuple[Windowed[Any], Any]]:
        return ((w, _plain(v)) for w, v in self.store.all())

    def backward_all(self) -> Iterator[tuple[Windowed[Any], Any]]:
        return ((w, _plain(v)) for w, v in self.store.backward_all())
