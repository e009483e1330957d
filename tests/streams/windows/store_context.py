"""A StateStoreContext for store-level tests: a real ThreadCache, changelog records kept in a list."""

from pathlib import Path

from strom.kafka.serdes import Serdes
from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import ChangelogRecord, RecordContext, changelog_topic_name


class StoreTestContext:
    application_id = "app"
    task_id = "0_0"
    partition = 0

    def __init__(self, state_dir: Path, cache_bytes: int = 1 << 20) -> None:
        self.state_dir = state_dir
        self.cache = ThreadCache(cache_bytes)
        self.key_serde = Serdes.String()
        self.value_serde = Serdes.Long()
        self.record_context = RecordContext(0)
        self.changelog: list[ChangelogRecord] = []
        self.registered: dict[str, tuple[object, object, bool]] = {}

    def set_record_context(self, record_context: RecordContext) -> None:
        self.record_context = record_context

    def at(self, timestamp: int) -> None:
        self.record_context = RecordContext(timestamp, "input", 0, timestamp)

    def changelog_topic(self, store_name: str) -> str:
        return changelog_topic_name(self.application_id, store_name)

    def log_change(self, store_name, key, value, timestamp, headers) -> None:
        self.changelog.append(ChangelogRecord(key, value, len(self.changelog), timestamp))

    def register_store(self, store, transaction, logged) -> None:
        self.registered[store.name] = (store, transaction, logged)

    def transaction(self, name: str):
        return self.registered[name][1]
