"""The state manager of one task: its stores, their restoration, checkpoint and transactional commit.

Source-agnostic: whoever runs the task (the TopologyTestDriver, the Spark runtime) reads the changelog
and feeds ``restore``, drives ``flush`` / ``commit`` / ``abort``, and passes the changelog offsets the
committed transaction reached.

Each store keeps its committed changelog offset itself (RocksDB: in the same WriteBatch as the data),
which is what restoration resumes from. The task's ``.checkpoint`` file (Kafka's format: version,
count, then ``topic partition offset`` lines) mirrors those offsets for persistent stores, so tools can
see how far a task's local state is without opening RocksDB. As Kafka Streams' ``checkpointNeeded``, a
commit or restore rewrites it only once the offsets moved more than ``CHECKPOINT_DELTA`` records past
the last one written, and ``close`` always does: a file per task at every commit (every 100 ms under
exactly-once) cost a commit more than its stores' writes. Restoration never reads it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from strom.errors import ProcessorStateError, TopologyError
from strom.streams.state.cache import ThreadCache
from strom.streams.state.context import (
    ChangelogRecord,
    StateStore,
    StoreTransaction,
    cache_namespace,
)

__all__ = [
    "CHECKPOINT_DELTA",
    "CHECKPOINT_FILE",
    "RESTORE_BATCH_SIZE",
    "ProcessorStateManager",
    "read_checkpoint",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

CHECKPOINT_FILE = ".checkpoint"
_CHECKPOINT_VERSION = 0
RESTORE_BATCH_SIZE = 10_000
CHECKPOINT_DELTA = 10_000
"""Changelog records the stores must move past the checkpoint file before a commit or restore rewrites
it (Kafka Streams' ``OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT``)."""


@dataclass
class _Registered:
    store: StateStore
    transaction: StoreTransaction
    logged: bool
    """True when the store has a changelog to restore from: its own, or a source topic."""


class ProcessorStateManager:
    """Owns the stores of one task (``task_id``) and their changelog partition ``partition``."""

    def __init__(self, task_id: str, partition: int, state_dir: Path | str,
                 changelog_topic: Callable[[str], str], cache: ThreadCache | None = None) -> None:
        self.task_id = task_id
        self.partition = partition
        self.state_dir = Path(state_dir)
        self._changelog_topic = changelog_topic
        self._cache = cache
        self._stores: dict[str, _Registered] = {}
        self._source_changelogs: dict[str, str] = {}
        self._checkpointed: dict[tuple[str, int], int] | None = None

    @property
    def checkpoint_path(self) -> Path:
        return self.state_dir / CHECKPOINT_FILE

    def use_source_changelog(self, store_name: str, topic: str) -> None:
        """Store ``store_name`` (logging disabled) restores from the task's partition of source topic
        ``topic``; its committed offset is the task's consumed position there. Call before the stores
        open. A runtime restores such a store only up to the task's committed offset of that partition
        (``source_changelog_stores``): records past it are processed again and must not be in it."""
        self._source_changelogs[store_name] = topic

    def source_changelog_stores(self) -> dict[str, tuple[str, int]]:
        """Store name -> (source topic, partition) of the stores whose changelog is a source topic."""
        return {name: (topic, self.partition) for name, topic in self._source_changelogs.items()
                if name in self._stores}

    def register_store(self, store: StateStore, transaction: StoreTransaction, logged: bool) -> None:
        """Called from a store's ``init``. A persistent logged store with data but no offset is wiped:
        without an offset nobody knows which changelog records its data already contains."""
        if store.name in self._stores:
            raise TopologyError(f"Store {store.name!r} is registered twice in task {self.task_id}; "
                                "give each store a unique name.")
        logged = logged or store.name in self._source_changelogs
        if logged and store.persistent and transaction.committed_offset is None:
            transaction.wipe()
        self._stores[store.name] = _Registered(store, transaction, logged)

    def changelog_partitions(self) -> dict[str, tuple[str, int]]:
        """Logged store name -> (changelog topic, partition) to read for restoration."""
        return {name: (self._topic_of(name), self.partition)
                for name, registered in self._stores.items() if registered.logged}

    def changelog_offsets(self) -> dict[str, int | None]:
        """Logged store name -> the changelog offset to restore from (None: from the beginning)."""
        return {name: registered.transaction.committed_offset
                for name, registered in self._stores.items() if registered.logged}

    def restore(self, store_name: str, records: Iterable[ChangelogRecord | tuple[Any, ...]]) -> int:
        """Replay changelog records (in offset order, from ``changelog_offsets()[store_name]``) into the
        store; returns how many were applied. Call before the task processes, or between commits to
        catch up with records another instance wrote (the store's cached entries are then dropped)."""
        iterator = iter(records)
        # the records stay the caller's tuples (key, value, offset, timestamp): no object per record
        return self.restore_batches(store_name, iter(lambda: list(islice(iterator, RESTORE_BATCH_SIZE)), []))

    def restore_batches(self, store_name: str,
                        batches: Iterable[Sequence[ChangelogRecord | tuple[Any, ...]]]) -> int:
        """``restore`` of records handed over in non-empty lists, each applied as one write batch (a
        runtime passes what each consumer fetch returned, at most a few thousand records)."""
        registered = self._registered(store_name)
        if not registered.logged:
            raise TopologyError(f"Store {store_name!r} has logging disabled, so it has no changelog "
                                "to restore from.")
        restored = 0
        restore = registered.transaction.restore
        for batch in batches:
            if not restored:
                self._drop_cached(store_name)
            restore(batch)
            restored += len(batch)
        if restored:
            log.info("Restored %d records into store %s of task %s", restored, store_name, self.task_id)
            self._write_checkpoint(enforce=False)
        return restored

    def flush(self) -> None:
        """Flush every store's cache: dirty entries go to the changelog and the uncommitted buffers,
        and are forwarded downstream. The task's commit does this before flushing its producer."""
        for registered in self._stores.values():
            registered.store.flush()

    def commit(self, changelog_offsets: Mapping[str, int]) -> None:
        """Apply every store's uncommitted writes together with its new changelog offset (the offset
        after its last changelog record in the committed transaction; absent: unchanged)."""
        unknown = set(changelog_offsets) - set(self._stores)
        if unknown:
            raise ValueError(f"Changelog offsets for unknown stores {sorted(unknown)} in task {self.task_id}")
        for name, registered in self._stores.items():
            registered.transaction.commit(changelog_offsets.get(name))
        self._write_checkpoint(enforce=False)

    def abort(self) -> None:
        """Drop uncommitted writes and cached entries: stores are back at their last commit."""
        for name, registered in self._stores.items():
            registered.transaction.abort()
            if self._cache is not None:
                self._cache.clear(cache_namespace(self.task_id, name))

    def close(self) -> None:
        """Close all stores, the checkpoint file brought up to their committed offsets. Commit first:
        writes not committed are dropped."""
        if self._stores:
            self._write_checkpoint(enforce=True)
        for registered in self._stores.values():
            pending = getattr(registered.transaction, "uncommitted_writes", 0)
            if pending:
                log.warning("Closing store %s of task %s with %d uncommitted writes; they are dropped",
                            registered.store.name, self.task_id, pending)
            registered.store.close()
        self._stores.clear()

    def _drop_cached(self, store_name: str) -> None:
        """Cached entries may predate the records being restored; uncommitted ones must not exist."""
        if self._cache is None:
            return
        namespace = cache_namespace(self.task_id, store_name)
        if self._cache.named_cache(namespace).dirty_keys():
            raise RuntimeError(f"Store {store_name} of task {self.task_id} has unflushed cached writes; "
                               "commit or abort before restoring")
        self._cache.clear(namespace)

    def _topic_of(self, store_name: str) -> str:
        """The topic a store restores from: its source topic, else its changelog."""
        return self._source_changelogs.get(store_name) or self._changelog_topic(store_name)

    def _registered(self, name: str) -> _Registered:
        try:
            return self._stores[name]
        except KeyError:
            raise TopologyError(f"No store {name!r} in task {self.task_id}; registered stores: "
                                f"{sorted(self._stores)}.") from None

    def _write_checkpoint(self, enforce: bool) -> None:
        """Mirrors the persistent logged stores' committed offsets into the checkpoint file when they
        changed (``enforce``) or moved more than ``CHECKPOINT_DELTA`` records past the file."""
        offsets = {}
        for name, registered in self._stores.items():
            offset = registered.transaction.committed_offset
            if registered.logged and registered.store.persistent and offset is not None:
                offsets[(self._topic_of(name), self.partition)] = offset
        written = self._checkpointed
        if offsets != written and (enforce or checkpoint_needed(written or {}, offsets)):
            write_checkpoint(self.checkpoint_path, offsets)
            self._checkpointed = offsets


def checkpoint_needed(written: Mapping[tuple[str, int], int], offsets: Mapping[tuple[str, int], int]) -> bool:
    """Whether ``offsets`` moved more than ``CHECKPOINT_DELTA`` records past the checkpoint ``written``."""
    return sum(offset - written.get(tp, 0) for tp, offset in offsets.items()) > CHECKPOINT_DELTA


def write_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Write Kafka's OffsetCheckpoint format atomically (temporary file, rename).

    No fsync: the offsets restoration trusts live inside the stores; this file mirrors them.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [str(_CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Read a checkpoint file; a missing file means no offsets."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return {}
    try:
        version, count = int(lines[0]), int(lines[1])
        if version != _CHECKPOINT_VERSION:
            raise ValueError(f"unknown version {version}")
        offsets = {}
        for line in lines[2:2 + count]:
            topic, partition, offset = line.split()
            offsets[(topic, int(partition))] = int(offset)
        if len(offsets) != count:
            raise ValueError(f"expected {count} entries, found {len(offsets)}")
        return offsets
    except (ValueError, IndexError) as exc:
        raise ProcessorStateError(f"Corrupt checkpoint file {path}: {exc}. Delete it; the task then restores "
                            "its stores from their changelogs.") from exc
