"""The persistent key-value store on RocksDB (rocksdict), under ``<task state dir>/rocksdb/<store>``.

The changelog offset the data corresponds to is kept in the same database (column family
``strom-offsets``) and written in the same WriteBatch as the data, so after a crash the store and
its offset always agree: committed state plus the offset to resume restoring from. Restores write
without the write-ahead log; atomic flushes keep the two families together (the restore section
below the options says how).

Every database opens with the options Kafka Streams' RocksDBStore sets (``rocksdb_options``): a bloom
filter, so a point lookup of an absent key rarely reads a block; a 50 MiB block cache; 16 MiB write
buffers, three of them; no compression. For point lookups (what a store behind the record cache does per
record) it adds a bloom filter over each memtable's keys, as RocksDB's own ``OptimizeForPointLookup``
does (without it every get searched up to three 16 MiB memtable skip lists: ~45% of a get's time at 1M
keys), and 1 KiB blocks instead of 4 KiB, so the same 50 MiB cache holds the blocks of more keys (at 5M
keys a get of a present key took ~0.6x the time). Index and filter blocks stay outside the block cache
(RocksDB's default): inside it, with a count at 1M keys, lookups ran 7x slower here (they were evicted
and read again). ``rocksdb.config.setter`` names a user's hook that changes the options per store
(docs/state.md shows one bounding all stores' memory with a shared cache).
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import struct
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, Rdict, WriteBatch, WriteOptions

from strom.errors import ConfigError, InvalidStateStoreError, ProcessorStateError
from strom.streams.internals.compiled import Lines
from strom.streams.state.base import BytesStore, KeyValueIterator
from strom.streams.state.context import StateStore, StateStoreContext

__all__ = ["RocksDBStore"]

log = logging.getLogger(__name__)

_OFFSETS_CF = "strom-offsets"
_OFFSET_KEY = b"changelog-offset"
_OFFSET = struct.Struct(">q")


ROCKSDB_CONFIG_SETTER = "rocksdb.config.setter"
BLOCK_CACHE_BYTES = 50 * 1024 * 1024
BLOCK_SIZE = 1024
BLOOM_BITS_PER_KEY = 10
MEMTABLE_BLOOM_RATIO = 0.02  # of the write buffer: ~10 bits per entry of 16-byte values, as RocksDB's recipe
WRITE_BUFFER_BYTES = 16 * 1024 * 1024
MAX_WRITE_BUFFERS = 3


# --- restore (bulk loading) --------------------------------------------------------------------
# While a store restores, RocksDB's automatic compactions wait until level 0 holds this many files
# (each a flushed 16 MiB write buffer): they then merge in one compaction instead of one every four
# flushes, rewriting the data once. A 1.2M-record restore spent a fifth of its CPU compacting. The
# bound keeps level 0 well under RocksDB's write slowdown (20 files), which Kafka Streams' old bulk
# loading (compactions off for the whole restore) ran into; the first write after the restore (a
# commit) or reaching the bound turns compactions back on.
#
# Restore batches also skip the write-ahead log (as Kafka Streams writes RocksDB): the log cost a
# sixth of a restore's CPU once the rest was lean. Databases open with atomic flush, so every flush
# persists all column families together: after a crash, data and changelog offset (in its own
# family) are both at the last flush, from which the changelog tail is restored again. Before the
# first write with the log after a restore (a commit), the restored data is flushed (data family,
# then offsets): otherwise a crash could keep the commit's offset, replayed from the log, while losing
# restored records it vouches for. Closing flushes too.
RESTORE_LEVEL0_FILES = 10
_WITHOUT_WAL = WriteOptions()
_WITHOUT_WAL.disable_wal = True


def rocksdb_options(store_name: str, configs: dict[str, Any] | None = None) -> Options:
    """Kafka Streams' RocksDB options with strom's two for point lookups (memtable bloom filter, 1 KiB
    blocks), then the ``rocksdb.config.setter`` of ``configs`` if set."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    table = BlockBasedOptions()
    table.set_block_cache(Cache(BLOCK_CACHE_BYTES))
    table.set_block_size(BLOCK_SIZE)
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    options.set_block_based_table_factory(table)
    options.set_memtable_whole_key_filtering(True)
    options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
    options.set_level_compaction_dynamic_level_bytes(True)  # RocksDB's default only since 8.4
    options.set_write_buffer_size(WRITE_BUFFER_BYTES)
    options.set_max_write_buffer_number(MAX_WRITE_BUFFERS)
    options.set_compression_type(DBCompressionType.none())
    options.increase_parallelism(max(os.cpu_count() or 2, 2))
    setter = (configs or {}).get(ROCKSDB_CONFIG_SETTER)
    if setter is not None:
        config_setter(setter)(store_name, options, configs)
    return options


def config_setter(value: Any) -> Any:
    """The hook ``rocksdb.config.setter`` names: ``"module:name"`` (or ``"module.name"``), a class with a
    ``set_config(store_name, options, configs)`` method (instantiated per store, as Kafka does), an
    instance with that method, or a function taking the same three arguments. ``options`` is the
    store's rocksdict ``Options``, already holding strom's settings."""
    if isinstance(value, str):
        module, _, name = value.rpartition(":") if ":" in value else value.rpartition(".")
        try:
            value = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError.bad_value(ROCKSDB_CONFIG_SETTER, value,
                                        "an importable 'module:name' of a class or function") from exc
    if isinstance(value, type):
        value = value()
    method = getattr(value, "set_config", None)
    if callable(method):
        return method
    if callable(value):
        return value
    raise ConfigError.bad_value(ROCKSDB_CONFIG_SETTER, value,
                                "a class or object with set_config(store_name, options, configs), or a "
                                "function taking those arguments")


class _StoreIterator:
    """Holds the only reference to a RocksDB iterator, so closing the store can release it."""

    def __init__(self, store: str, raw: Any, from_key: bytes | None, to_key: bytes | None,
                 reverse: bool) -> None:
        self._store = store
        self._raw = raw
        self._closed_under = False
        self._reverse = reverse
        self._bound = from_key if reverse else to_key
        start = to_key if reverse else from_key
        if reverse:
            raw.seek_to_last() if start is None else raw.seek_for_prev(start)
        else:
            raw.seek_to_first() if start is None else raw.seek(start)

    def __iter__(self) -> _StoreIterator:
        return self

    def __next__(self) -> tuple[bytes, bytes]:
        raw = self._raw
        if raw is None or not raw.valid():
            if self._closed_under:
                raise InvalidStateStoreError(f"Store {self._store} was closed while an iterator over it "
                                             "was open; finish iterating before the task closes.")
            self.release()
            raise StopIteration
        key = raw.key()
        bound = self._bound
        if bound is not None and ((key < bound) if self._reverse else (key > bound)):
            self.release()
            raise StopIteration
        value = raw.value()
        raw.prev() if self._reverse else raw.next()
        return key, value

    def release(self) -> None:
        self._raw = None

    def store_closed(self) -> None:
        self._raw = None
        self._closed_under = True


class RocksDBStore(BytesStore):
    """Kafka's RocksDBStore over rocksdict in raw (bytes) mode."""

    persistent = True

    def __init__(self, name: str, parent_dir: str = "rocksdb") -> None:
        super().__init__(name)
        self._parent_dir = parent_dir
        self._db: Any = None
        self._offsets: Any = None
        self._offsets_handle: Any = None
        self._iterators: weakref.WeakSet[_StoreIterator] = weakref.WeakSet()
        self._configs: dict[str, Any] | None = None
        self._compactions_deferred = False
        self._unlogged = False  # restore writes not yet flushed (written without the WAL)
        self.path: Path | None = None

    @property
    def is_open(self) -> bool:
        return self._db is not None

    def init(self, context: StateStoreContext, root: StateStore) -> None:
        self.path = Path(context.state_dir) / self._parent_dir / self.name
        # hosts of bare stores (benchmarks, tools) may have no configuration: Kafka's defaults then
        self._configs = getattr(context, "app_configs", None)
        self._open(self.path)

    def _open(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        options = rocksdb_options(self.name, self._configs)
        options.set_atomic_flush(True)  # restores write without the WAL: see the restore section above
        try:
            self._db = Rdict(str(path), options=options,
                             column_families={_OFFSETS_CF: Options(raw_mode=True)})
        except Exception as exc:
            raise ProcessorStateError(
                f"Cannot open RocksDB store {self.name!r} at {path}: {exc}. Another process may be "
                "using the same state.dir for this task; give each instance its own state.dir.") from exc
        self._offsets = self._db.get_column_family(_OFFSETS_CF)
        self._offsets_handle = self._db.get_column_family_handle(_OFFSETS_CF)

    def _live(self) -> Any:
        if self._db is None:
            raise InvalidStateStoreError(f"Store {self.name} is not open; use it between init and close.")
        return self._db

    def get(self, key: bytes) -> bytes | None:
        db = self._db
        if db is None:
            self._live()  # raises
        return db.get(key)

    def fused_get(self) -> Lines:
        """``r = get(kb)`` as lines of Python for a caller that inlines it (a cached store's miss): no
        call of ``get`` per read. The database is read from the store each time (``wipe`` reopens it)."""
        return ("{p}db = {p}store._db", "if {p}db is None:", "    {p}store._live()",
                "r = {p}db.get(kb)"), {"{p}store": self}

    def put(self, key: bytes, value: bytes | None) -> None:
        db = self._live()
        if value is None:
            db.delete(key)
        else:
            db.put(key, value)

    def _iterate(self, from_key: bytes | None, to_key: bytes | None, reverse: bool) -> KeyValueIterator:
        iterator = _StoreIterator(self.name, self._live().iter(), from_key, to_key, reverse)
        self._iterators.add(iterator)
        return iterator

    def approximate_num_entries(self) -> int:
        return self._live().property_int_value("rocksdb.estimate-num-keys") or 0

    @property
    def committed_offset(self) -> int | None:
        raw = self._offsets.get(_OFFSET_KEY) if self._offsets is not None else None
        return None if raw is None else _OFFSET.unpack(raw)[0]

    def write_batch(self, writes: Iterable[tuple[bytes, bytes | None]], changelog_offset: int | None) -> None:
        """Apply writes and the changelog offset they bring the store to in one atomic WriteBatch, in key
        order: RocksDB inserts each key into its memtable's skip list from where the previous one went,
        so sorted keys cost a fraction of keys in arrival order (a commit's keys are a hash's order).
        The keys are sorted apart from their values: a dict of bytes is not tracked by the garbage
        collector, while a list of 100k (key, value) pairs made it run full collections."""
        if self._unlogged:
            self._flush_restored()
        if self._compactions_deferred:
            self._compact_again()
        latest = dict(writes)  # a key written twice keeps its last value, as in a batch
        keys = sorted(latest)
        self._write(zip(keys, map(latest.__getitem__, keys), strict=True), changelog_offset)

    def restore_batch(self, writes: Iterable[tuple[bytes, bytes | None]], changelog_offset: int | None
                      ) -> None:
        """``write_batch`` for a restore (see the restore section of this module's options): without the
        write-ahead log, and compactions wait while level 0 holds fewer than ``RESTORE_LEVEL0_FILES``
        (checked before each batch)."""
        if self._level0_files() < RESTORE_LEVEL0_FILES:
            if not self._compactions_deferred:
                self._live().set_options({"disable_auto_compactions": "true"})
                self._compactions_deferred = True
        elif self._compactions_deferred:
            self._compact_again()
        self._unlogged = True
        self._write(writes, changelog_offset, _WITHOUT_WAL)

    def _flush_restored(self) -> None:
        """Persist what restores wrote without the WAL: the data first, then the offset, so a crash in
        between leaves the data ahead of its offset (the changelog tail is replayed over it, to the same
        state), never behind it."""
        db = self._live()
        db.flush()
        self._offsets.flush()
        self._unlogged = False

    def _level0_files(self) -> int:
        return self._live().property_int_value("rocksdb.num-files-at-level0") or 0

    def _compact_again(self) -> None:
        self._compactions_deferred = False
        self._live().set_options({"disable_auto_compactions": "false"})

    def _write(self, writes: Iterable[tuple[bytes, bytes | None]], changelog_offset: int | None,
               options: WriteOptions | None = None) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in writes:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        if changelog_offset is not None:
            batch.put(_OFFSET_KEY, _OFFSET.pack(changelog_offset), self._offsets_handle)
        if not batch.is_empty():
            self._live().write(batch, options)

    def wipe(self) -> None:
        """Delete the database files and start empty (the store is then restored from its changelog)."""
        if self._is_empty():
            return
        path = self.path
        self.close()
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
            self._open(path)

    def _is_empty(self) -> bool:
        if self.committed_offset is not None:
            return False
        iterator = self._live().iter()
        iterator.seek_to_first()
        return not iterator.valid()

    def flush(self) -> None:
        """Nothing to force: every commit's write batch goes through RocksDB's write-ahead log (restore
        batches do not, and are flushed before the first commit after them), and a batch an OS crash
        loses leaves the store at an older offset, from which it restores the changelog tail."""

    def close(self) -> None:
        if self._db is None:
            return
        for iterator in list(self._iterators):
            iterator.store_closed()
        if self._unlogged:
            self._flush_restored()
        self._offsets = self._offsets_handle = None
        self._compactions_deferred = False
        db, self._db = self._db, None
        db.close()
