"""The contract between state stores and the engine that hosts them.

Stores are built before any task exists; at ``init`` they receive a ``StateStoreContext`` that the
engine's processor context implements. Through it a store learns which task it belongs to, where its
files go, how to send changelog records, which record cache to use and how to register with the
task's state manager. Keeping this a protocol lets the engine depend on the state layer and never the
reverse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

__all__ = [
    "ChangelogRecord", "FlushListener", "Headers", "KeyValueStore", "RecordContext", "StateStore",
    "StateStoreContext", "StoreTransaction", "cache_namespace", "changelog_topic_name",
]

if TYPE_CHECKING:
    from strom.kafka.serdes import Serde
    from strom.streams.state.cache import ThreadCache

K = TypeVar("K")
V = TypeVar("V")

Headers = Sequence[tuple[str, bytes | None]]
"""Record headers as confluent-kafka gives them: (name, value) pairs, names may repeat."""


class RecordContext(NamedTuple):
    """Where the record being processed came from.

    A cache entry keeps the context of the record that last wrote it, so that when the entry is
    flushed later, the changelog record and the forwarded ``Change`` carry that record's timestamp,
    topic, partition, offset and headers, not those of whatever record triggered the flush.
    (A NamedTuple: one is made per record, and tuples are the cheapest immutable objects to make.)
    """

    timestamp: int
    topic: str | None = None
    partition: int = -1
    offset: int = -1
    headers: Headers = ()


class ChangelogRecord(NamedTuple):
    """One record read back from a store's changelog partition, in offset order.

    ``value`` None is a tombstone. ``timestamp`` is the record's timestamp: timestamped stores keep
    it next to the value (Kafka's ValueAndTimestamp layout), so restoring needs it.
    """

    key: bytes
    value: bytes | None
    offset: int
    timestamp: int


def changelog_topic_name(application_id: str, store_name: str) -> str:
    """Kafka Streams' changelog topic name: one compacted topic per store, one partition per task."""
    return f"{application_id}-{store_name}-changelog"


def cache_namespace(task_id: str, store_name: str) -> str:
    """Name of a store's NamedCache in the thread's cache, as Kafka's ``nameSpaceFromTaskIdAndStore``."""
    return f"{task_id}-{store_name}"


class StateStore(Protocol):
    """What every store offers the engine, whatever its layers."""

    @property
    def name(self) -> str: ...

    @property
    def persistent(self) -> bool:
        """True when the store keeps its data on disk across restarts (RocksDB)."""
        ...

    @property
    def is_open(self) -> bool: ...

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        """Open the store for one task; ``root`` is the outermost layer, the one registered."""
        ...

    def flush(self) -> None:
        """Push cached writes down to the changelog and the task's uncommitted write buffer."""
        ...

    def close(self) -> None: ...


class KeyValueStore(StateStore, Protocol[K, V]):
    """Kafka Streams' KeyValueStore: ordered by serialized key; iterators yield (key, value) pairs."""

    def get(self, key: K) -> V | None: ...

    def put(self, key: K, value: V | None) -> None:
        """Store ``value`` under ``key``; None deletes the key."""
        ...

    def put_if_absent(self, key: K, value: V) -> V | None:
        """Put only when the key has no value; returns the value that was there."""
        ...

    def put_all(self, entries: Sequence[tuple[K, V | None]]) -> None: ...

    def delete(self, key: K) -> V | None:
        """Remove the key; returns the value it had."""
        ...

    def range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        """Entries with from_key <= key <= to_key in serialized-key order; None means unbounded."""
        ...

    def reverse_range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]: ...

    def all(self) -> Iterator[tuple[K, V]]: ...

    def reverse_all(self) -> Iterator[tuple[K, V]]: ...

    def prefix_scan(self, prefix: Any, prefix_key_serializer: Any) -> Iterator[tuple[K, V]]:
        """Entries whose serialized key starts with ``prefix`` serialized by ``prefix_key_serializer``."""
        ...

    def approximate_num_entries(self) -> int: ...


class StoreTransaction(Protocol):
    """The layer that buffers a store's uncommitted writes (transactional state stores, KIP-892).

    The state manager drives it: ``commit`` applies the buffer and the new changelog offset to the
    inner store in one atomic write; ``abort`` drops the buffer; ``restore`` writes committed
    changelog records straight into the inner store.
    """

    @property
    def committed_offset(self) -> int | None:
        """The changelog offset the inner store has applied up to (next offset to read), if known."""
        ...

    def commit(self, changelog_offset: int | None) -> None: ...

    def abort(self) -> None: ...

    def restore(self, records: Sequence[ChangelogRecord]) -> None: ...

    def wipe(self) -> None:
        """Delete all committed data, so the store can be restored from the start of its changelog."""
        ...


FlushListener = Callable[[Any, Any, Any, int], None]
"""Called by a caching store for each entry it flushes: ``(key, new_value, old_value, timestamp)``.

Keys and values are deserialized; ``old_value`` is None unless the listener was set with
``send_old_values``. For timestamped stores the values are plain (unwrapped) and ``timestamp`` is
the new value's timestamp. The record context is the entry's while the listener runs, so a KTable
processor forwards ``Change(new_value, old_value)`` with the right metadata.
"""


class StateStoreContext(Protocol):
    """Implemented by the engine's processor context; used by stores at ``init`` and when flushing."""

    @property
    def application_id(self) -> str: ...

    @property
    def task_id(self) -> str:
        """``<subtopology>_<partition>``, e.g. ``0_3``."""
        ...

    @property
    def partition(self) -> int:
        """The task's partition: also the partition of every changelog it writes."""
        ...

    @property
    def state_dir(self) -> Path:
        """The task's own directory under ``state.dir`` (``<state.dir>/<application.id>/<task_id>``)."""
        ...

    @property
    def key_serde(self) -> Serde[Any]:
        """``default.key.serde``: used by stores built without a key serde."""
        ...

    @property
    def value_serde(self) -> Serde[Any]:
        """``default.value.serde``: used by stores built without a value serde."""
        ...

    @property
    def cache(self) -> ThreadCache:
        """The record cache of the thread running the task (budget ``statestore.cache.max.bytes``)."""
        ...

    @property
    def record_context(self) -> RecordContext:
        """The context of the record being processed now."""
        ...

    def set_record_context(self, record_context: RecordContext) -> None:
        """Caching stores set an entry's context while flushing it, and restore the previous one."""
        ...

    def changelog_topic(self, store_name: str) -> str:
        """Usually ``changelog_topic_name(application_id, store_name)``; the engine may reuse a topic."""
        ...

    def log_change(self, store_name: str, key: bytes, value: bytes | None, timestamp: int,
                   headers: Headers) -> None:
        """Send a changelog record to partition ``partition`` of ``changelog_topic(store_name)``."""
        ...

    def register_store(self, store: StateStore, transaction: StoreTransaction, logged: bool) -> None:
        """Register a store with the task's state manager (for flush, commit, restore, close)."""
        ...
