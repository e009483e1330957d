"""Offsets sent inside a transaction (TxnOffsetCommit), held back until the transaction ends.

They become the group's committed offsets only when the commit marker reaches the group's
``__consumer_offsets`` partition; an abort drops them. Pending offsets are written to disk (one file
per producer id, fsync'd) when they arrive, so a transaction that a broker restart interrupts can
still commit them, and a commit decided before a crash still applies them on recovery.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from strom.broker.transactions.metadata import TopicPartition


@dataclass(frozen=True, slots=True)
class PendingOffset:
    offset: int
    leader_epoch: int
    metadata: str | None


GroupOffsets = dict[TopicPartition, PendingOffset]


class PendingTxnOffsets:
    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._dir.mkdir(parents=True, exist_ok=True)
        self._pending: dict[int, dict[str, GroupOffsets]] = {}
        for path in self._dir.glob("*.json"):
            self._pending[int(path.stem)] = _decode(json.loads(path.read_text()))

    def add(self, producer_id: int, group_id: str, offsets: GroupOffsets) -> None:
        groups = self._pending.setdefault(producer_id, {})
        groups.setdefault(group_id, {}).update(offsets)
        self._write(producer_id, groups)

    def take(self, producer_id: int, group_ids: set[str] | None = None) -> dict[str, GroupOffsets]:
        """Removes and returns the producer's pending offsets (of ``group_ids``, or of every group)."""
        groups = self._pending.get(producer_id, {})
        taken = {g: o for g, o in groups.items() if group_ids is None or g in group_ids}
        for group_id in taken:
            del groups[group_id]
        if groups:
            self._write(producer_id, groups)
        else:
            self._pending.pop(producer_id, None)
            (self._dir / f"{producer_id}.json").unlink(missing_ok=True)
        return taken

    def groups_of(self, producer_id: int) -> set[str]:
        return set(self._pending.get(producer_id, {}))

    def has_pending(self, group_id: str, partitions: set[TopicPartition]) -> bool:
        """True if an open transaction holds offsets of one of the group's partitions (KIP-447)."""
        return any(partitions & groups.get(group_id, {}).keys() for groups in self._pending.values())

    def _write(self, producer_id: int, groups: dict[str, GroupOffsets]) -> None:
        path = self._dir / f"{producer_id}.json"
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as file:
            json.dump(_encode(groups), file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)


def _encode(groups: dict[str, GroupOffsets]) -> dict:
    return {group: [[t, p, o.offset, o.leader_epoch, o.metadata] for (t, p), o in offsets.items()]
            for group, offsets in groups.items()}


def _decode(data: dict) -> dict[str, GroupOffsets]:
    return {group: {(t, p): PendingOffset(offset, epoch, meta) for t, p, offset, epoch, meta in rows}
            for group, rows in data.items()}
