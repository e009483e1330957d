"""A minimal host for stores: what the engine's processor context provides, built from the real
ThreadCache and ProcessorStateManager. The record collector is stood in by a list that assigns
changelog offsets the way a partition would (0, 1, 2, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strom.kafka.serdes import Serdes
from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import ChangelogRecord, RecordContext, changelog_topic_name
from strom.streams.state.manager import ProcessorStateManager


class StoreHost:
    def __init__(self, state_dir: Path, cache_bytes: int = 10 * 1024 * 1024, task_id: str = "0_0",
                 cache: ThreadCache | None = None) -> None:
        self.application_id = "app"
        self.task_id = task_id
        self.partition = int(task_id.split("_")[1])
        self.state_dir = state_dir / "app" / task_id
        self.cache = cache if cache is not None else ThreadCache(cache_bytes)
        self.key_serde = Serdes.String()
        self.value_serde = Serdes.String()
        self.record_context = RecordContext(timestamp=0, topic="input", partition=self.partition, offset=0)
        self.changelogs: dict[str, list[ChangelogRecord]] = {}
        self.manager = ProcessorStateManager(task_id, self.partition, self.state_dir,
                                             self.changelog_topic, self.cache)

    def set_record_context(self, record_context: RecordContext) -> None:
        self.record_context = record_context

    def changelog_topic(self, store_name: str) -> str:
        return changelog_topic_name(self.application_id, store_name)

    def log_change(self, store_name: str, key: bytes, value: bytes | None, timestamp: int,
                   headers: Any) -> None:
        log = self.changelogs.setdefault(store_name, [])
        log.append(ChangelogRecord(key, value, len(log), timestamp))

    def register_store(self, store: Any, transaction: Any, logged: bool) -> None:
        self.manager.register_store(store, transaction, logged)

    def at(self, timestamp: int, offset: int = 0) -> StoreHost:
        """Pretend the task is processing the record at ``offset`` with ``timestamp``."""
        self.record_context = RecordContext(timestamp, "input", self.partition, offset)
        return self

    def commit(self) -> None:
        """What the task does at commit: flush caches, then commit with the changelog end offsets."""
        self.manager.flush()
        self.manager.commit({name: len(log) for name, log in self.changelogs.items()})

    def init(self, builder: Any) -> Any:
        store = builder.build()
        store.init(self, store)
        return store
