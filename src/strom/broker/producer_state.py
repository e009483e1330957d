"""Idempotent and transactional producer state of one partition (KIP-98).

Per producer id the broker remembers the epoch and the last five batches written (first and last
sequence, offsets). A batch resent by the producer's retries is answered with the original offsets
and not written again; a sequence gap is rejected; an older epoch is fenced. Transactional batches
open a transaction whose first offset holds back the last stable offset (LSO) until its commit or
abort marker arrives; aborted transactions go into an index that read_committed fetches consult.

The state survives restarts: a snapshot file is written on segment roll and shutdown, and on start
the newest snapshot is loaded and the log after it replayed.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from strom.broker.log.records import BatchHeader, iter_records

log = logging.getLogger(__name__)

# replay(from_offset) yields (base offset, batch) for each stored batch at or after from_offset.
ReplaySource = Callable[[int], Iterable[tuple[int, bytes | memoryview]]]

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
MAX_CACHED_BATCHES = 5
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_INT32_MAX = 2**31 - 1

# Kafka error codes this module answers with.
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48


class AppendRejectedError(Exception):
    """A batch the partition must refuse; ``error_code`` is the Kafka error for the produce response."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def last_sequence(header: BatchHeader) -> int:
    """Sequence number of the batch's last record (sequences wrap after Int32.MAX)."""
    if header.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (header.base_sequence + header.last_offset_delta) % (_INT32_MAX + 1)


def read_control_record(batch: bytes | memoryview) -> tuple[int, int]:
    """(COMMIT or ABORT, coordinator epoch) of a control batch's record."""
    record = next(iter_records(batch))
    if record.key is None or len(record.key) < 4 or record.value is None or len(record.value) < 6:
        raise ValueError("control record is too short")
    _version, kind = CONTROL_KEY.unpack_from(record.key)
    _version, coordinator_epoch = CONTROL_VALUE.unpack_from(record.value)
    return kind, coordinator_epoch


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """A batch written by a producer: its sequence range and where it landed in the log."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last_sequence(header):
                return batch
        return None

    def to_json(self) -> dict:
        return {"pid": self.producer_id, "epoch": self.epoch, "coordinator_epoch": self.coordinator_epoch,
                "txn_first_offset": self.current_txn_first_offset, "last_timestamp": self.last_timestamp,
                "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                            for b in self.batches]}

    @classmethod
    def from_json(cls, data: dict) -> ProducerEntry:
        entry = cls(data["pid"], data["epoch"], coordinator_epoch=data["coordinator_epoch"],
                    current_txn_first_offset=data["txn_first_offset"], last_timestamp=data["last_timestamp"])
        entry.batches.extend(BatchMetadata(*b) for b in data["batches"])
        return entry


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: read_committed consumers drop its records in [first_offset, last_offset]."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class AbortedTxnIndex:
    """Append-only file of aborted transactions, ordered by the offset of their abort marker."""

    _ENTRY = struct.Struct(">qqqq")

    def __init__(self, path: Path) -> None:
        self._path = path
        self._entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []

    def load(self, keep_below: int, log_start: int = 0) -> None:
        """Reads the file, keeping entries whose marker lies in [log_start, keep_below); rewrites it.

        Entries below the log start (deleted by retention) are dropped here, at the next start."""
        data = self._path.read_bytes() if self._path.exists() else b""
        usable = len(data) - len(data) % self._ENTRY.size
        entries = [AbortedTxn(*self._ENTRY.unpack_from(data, pos))
                   for pos in range(0, usable, self._ENTRY.size)]
        self._set([e for e in entries if log_start <= e.last_offset < keep_below])

    def append(self, txn: AbortedTxn) -> None:
        with self._path.open("ab") as file:
            file.write(self._ENTRY.pack(txn.producer_id, txn.first_offset, txn.last_offset,
                                        txn.last_stable_offset))
        self._entries.append(txn)
        self._last_offsets.append(txn.last_offset)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound)."""
        found = []
        for txn in self._entries[bisect.bisect_left(self._last_offsets, fetch_offset):]:
            if txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                break  # every later transaction starts at or after this one's LSO
        return found

    def flush(self) -> None:
        if self._path.exists():
            with self._path.open("rb+") as file:
                os.fsync(file.fileno())

    def _set(self, entries: list[AbortedTxn]) -> None:
        self._entries = entries
        self._last_offsets = [e.last_offset for e in entries]
        tmp = self._path.with_suffix(".tmp")
        tmp.write_bytes(b"".join(self._ENTRY.pack(e.producer_id, e.first_offset, e.last_offset,
                                                  e.last_stable_offset) for e in entries))
        os.replace(tmp, self._path)


class AbortedRanges:
    """Offset ranges of aborted transactions, per producer id."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in aborted:
            self._ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))

    def contains(self, header: BatchHeader) -> bool:
        """True for a transactional data batch that belongs to an aborted transaction."""
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._ranges.get(header.producer_id, ())
        return any(first <= header.base_offset <= last for first, last in ranges)


class ProducerStateManager:
    """Producer ids, epochs, sequences and open transactions of one partition."""

    SNAPSHOT_SUFFIX = ".snapshot"
    SNAPSHOTS_KEPT = 2

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._dir.mkdir(parents=True, exist_ok=True)
        self._producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted = AbortedTxnIndex(directory / "aborted.txnindex")
        self.map_end_offset = 0  # every batch below this offset has been applied

    # -- the produce path ------------------------------------------------------------------------
    def check_append(self, header: BatchHeader) -> BatchMetadata | None:
        """Validates a batch before it is appended (a client's batch or a coordinator's marker).

        Returns the original batch if this one is a retry of it (answer with the original offsets and
        do not append); raises AppendRejectedError for a fenced epoch, a sequence gap or a
        non-transactional write inside an open transaction.
        """
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return None  # a new producer (or one whose state expired) may start at any sequence
        if header.producer_epoch < entry.epoch:
            raise AppendRejectedError(
                INVALID_PRODUCER_EPOCH,
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"the current epoch {entry.epoch}: this producer has been fenced")
        if header.is_control:
            return None
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return duplicate
        self._check_sequence(entry, header)
        if entry.current_txn_first_offset is not None and not header.is_transactional \
                and header.producer_epoch == entry.epoch:
            raise AppendRejectedError(
                INVALID_TXN_STATE,
                f"producer {header.producer_id} wrote a non-transactional batch inside its open transaction")
        return None

    @staticmethod
    def _check_sequence(entry: ProducerEntry, header: BatchHeader) -> None:
        if header.producer_epoch != entry.epoch:
            if header.base_sequence != 0:
                raise AppendRejectedError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {header.producer_id} started epoch {header.producer_epoch} at sequence "
                    f"{header.base_sequence}; a new epoch starts at 0")
            return
        last = entry.last_seq
        if last == NO_SEQUENCE:
            return
        expected = 0 if last == _INT32_MAX else last + 1
        if header.base_sequence != expected:
            raise AppendRejectedError(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {header.producer_id} sent sequence {header.base_sequence}, expected {expected}")

    def on_append(self, batch: bytes | memoryview, base_offset: int) -> None:
        """Records a batch that has just been appended at ``base_offset`` (data or control marker)."""
        header = BatchHeader.parse(batch)
        last_offset = base_offset + header.last_offset_delta
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None:
            entry = ProducerEntry(header.producer_id, header.producer_epoch)
            self._producers[header.producer_id] = entry
        if header.producer_epoch > entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = header.max_timestamp
        if header.is_control:
            kind, entry.coordinator_epoch = read_control_record(batch)
            self._complete_txn(entry, kind, last_offset)
            return
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(header.base_sequence, last_sequence(header), base_offset,
                                               last_offset, header.max_timestamp))
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = base_offset
            self._ongoing[entry.producer_id] = base_offset

    def _complete_txn(self, entry: ProducerEntry, kind: int, marker_offset: int) -> None:
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = None
        self._ongoing.pop(entry.producer_id, None)
        if first is None or kind != CONTROL_ABORT:
            return
        lso = self.first_unstable_offset()
        self.aborted.append(AbortedTxn(entry.producer_id, first, marker_offset,
                                       marker_offset + 1 if lso is None else lso))

    # -- the fetch path --------------------------------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, or None when no transaction is open."""
        return min(self._ongoing.values()) if self._ongoing else None

    def last_stable_offset(self, high_watermark: int, log_start: int) -> int:
        """Where read_committed reads stop: the oldest open transaction's start, not below the log start."""
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(max(first, log_start), high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        return self.aborted.collect(fetch_offset, upper_bound)

    def aborted_ranges(self) -> AbortedRanges:
        """Where aborted transactions lie, so that log compaction drops their records."""
        return AbortedRanges(self.aborted.collect(0, self.map_end_offset))

    def active_producers(self) -> list[ProducerEntry]:
        return list(self._producers.values())

    def producer(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forgets producers idle longer than producer.id.expiration.ms, unless a transaction is open."""
        expired = [p for p in self._producers.values()
                   if p.current_txn_first_offset is None and now_ms - p.last_timestamp > expiration_ms]
        for entry in expired:
            del self._producers[entry.producer_id]
        return len(expired)

    # -- persistence -----------------------------------------------------------------------------
    def take_snapshot(self) -> Path:
        """Writes the state up to ``map_end_offset`` (call on segment roll and shutdown)."""
        path = self._dir / f"{self.map_end_offset:020d}{self.SNAPSHOT_SUFFIX}"
        tmp = path.with_suffix(".tmp")
        payload = {"offset": self.map_end_offset,
                   "producers": [e.to_json() for e in self._producers.values()]}
        with tmp.open("w") as file:
            json.dump(payload, file, separators=(",", ":"))
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
        self.aborted.flush()
        for old in self._snapshots()[:-self.SNAPSHOTS_KEPT]:
            old.unlink(missing_ok=True)
        return path

    def load(self, log_start: int, log_end: int, replay: ReplaySource) -> None:
        """Rebuilds the state: the newest snapshot not beyond ``log_end``, then the log after it."""
        self._producers.clear()
        self._ongoing.clear()
        start = log_start
        for path in reversed(self._snapshots()):
            offset = int(path.name[: -len(self.SNAPSHOT_SUFFIX)])
            if offset > log_end:
                path.unlink()  # the log was truncated below this snapshot
                continue
            if offset >= log_start and self._read_snapshot(path):
                start = offset
                break
        self.map_end_offset = start
        self.aborted.load(keep_below=start, log_start=log_start)
        replayed = 0
        for base_offset, batch in replay(start):
            self.on_append(batch, base_offset)
            replayed += 1
        self.map_end_offset = max(self.map_end_offset, log_end)
        log.debug("producer state of %s: snapshot at %d, %d batches replayed", self._dir, start, replayed)

    def _read_snapshot(self, path: Path) -> bool:
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable producer snapshot %s: %s", path, exc)
            return False
        for data in payload["producers"]:
            entry = ProducerEntry.from_json(data)
            self._producers[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                self._ongoing[entry.producer_id] = entry.current_txn_first_offset
        return True

    def _snapshots(self) -> list[Path]:
        return sorted(self._dir.glob(f"*{self.SNAPSHOT_SUFFIX}"))

