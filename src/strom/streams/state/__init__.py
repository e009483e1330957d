"""State stores, the record cache and changelogging for strom.streams (Kafka Streams' state layer).

Stores are layered as in Kafka Streams: metered (serdes, metrics) -> caching (record cache) ->
change-logging (changelog topic) -> transactional buffer -> inner store (in-memory or RocksDB).
"""

from strom.streams.state.cache import DEFAULT_CACHE_MAX_BYTES, ThreadCache, thread_cache_bytes
from strom.streams.state.context import (
    ChangelogRecord,
    FlushListener,
    KeyValueStore,
    RecordContext,
    StateStore,
    StateStoreContext,
    changelog_topic_name,
)
from strom.streams.state.internals.metered import MeteredKeyValueStore, MeteredTimestampedKeyValueStore
from strom.streams.state.manager import ProcessorStateManager, read_checkpoint
from strom.streams.state.stores import (
    KeyValueBytesStoreSupplier,
    KeyValueStoreBuilder,
    Stores,
    TimestampedKeyValueStoreBuilder,
)
from strom.streams.state.timestamped import ValueAndTimestamp

__all__ = [
    "DEFAULT_CACHE_MAX_BYTES",
    "ChangelogRecord",
    "FlushListener",
    "KeyValueBytesStoreSupplier",
    "KeyValueStore",
    "KeyValueStoreBuilder",
    "MeteredKeyValueStore",
    "MeteredTimestampedKeyValueStore",
    "ProcessorStateManager",
    "RecordContext",
    "StateStore",
    "StateStoreContext",
    "Stores",
    "ThreadCache",
    "TimestampedKeyValueStoreBuilder",
    "ValueAndTimestamp",
    "changelog_topic_name",
    "read_checkpoint",
    "thread_cache_bytes",
]
