"""StandbyTask: a replica of a stream task's stores on another machine (``num.standby.replicas``).

Kafka Streams' standby task: it never processes, it reads the active task's changelogs
(read_committed under exactly-once) into stores of its own and keeps their checkpoint. Here it lives
in the task's own directory on its machine (``<state.dir>/<application.id>/<task>``, under the task's
lease), built and restored exactly as the task's own stores are (``restore_task``). So when the
active task moves to this machine (its executor lost), opening it there replays only the changelog
records written since the standby's last update instead of the whole changelog.

A stream thread hosts its standbys beside its active tasks and updates them every
``UPDATE_EVERY_S``; between batches they stay open in the Python worker (``STANDBYS``), as parked
active tasks do, and close when another process asks for the task's lease (the active opening here).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from strom.kafka import clients
from strom.kafka.clients import CONNECT_AT_ONCE
from strom.kafka.reading import committed_offsets, end_offset
from strom.spark.runtime.lease import LeasedTask, TaskLease
from strom.spark.runtime.open_task import QUICK_EOF, TIMEOUT_S
from strom.spark.runtime.parked import ParkedTasks
from strom.spark.runtime.restore import restore_task
from strom.streams import config as cfg
from strom.streams.config import StreamsConfig
from strom.streams.processor.internals.task import StreamTask
from strom.streams.processor.records import TaskId
from strom.streams.processor.topology import Topology
from strom.streams.state.cache import ThreadCache

__all__ = ["COMMITTED_EVERY_S", "LEASE_WAIT_S", "STANDBYS", "UPDATE_EVERY_S", "StandbyTask", "update_all"]

UPDATE_EVERY_S = 0.5
"""How often a stream thread brings its standbys up to the end of the changelogs."""
COMMITTED_EVERY_S = 5.0
"""How often a thread reads its standbys' committed input offsets when their changelogs did not grow
and no bounded query asked (``StandbyTask.wants_committed``)."""
LEASE_WAIT_S = 5.0
"""How long a standby waits for the task's directory (a task parked here being closed)."""

STANDBYS = ParkedTasks()
"""This Python worker's standby tasks between batches."""


class StandbyTask(LeasedTask):
    """One task's stores, kept up to date from its changelogs; never processes."""

    def __init__(self, topology: Topology, config: StreamsConfig, task_id: TaskId, run_id: str) -> None:
        self.task_id = str(task_id)
        self.run_id = run_id
        self._config = config
        directory = Path(config[cfg.STATE_DIR]) / config.application_id / self.task_id
        self.lease = TaskLease.acquire(directory, LEASE_WAIT_S)
        try:
            self.task = StreamTask(task_id, topology.internal, config, None, ThreadCache(0))
            self.task.initialize()
            isolation = "read_committed" if config.exactly_once else "read_uncommitted"
            self._consumer: Consumer = clients.consumer(
                config[cfg.BOOTSTRAP_SERVERS], group_id=config.application_id,
                **{**CONNECT_AT_ONCE, **config.client_props("restore.consumer."),
                   "enable.partition.eof": True, **QUICK_EOF, "isolation.level": isolation})
        except BaseException:
            self.lease.release()
            raise
        self._log_ends: dict[str, int] = {}
        self._seen_ends: dict[str, int] = {}
        """Where its changelogs ended when it last looked (``wants_committed``)."""
        self._unchanged = False
        """``wants_committed`` just found every changelog ending where it did the time before (so where
        the last update read it to): an update without a committed read has nothing to read then."""
        self._committed: Mapping[tuple[str, int], int] = {}
        self._committed_at = float("-inf")
        self.bound_asked = False
        """A query with a position bound asked this standby since the committed offsets were last read
        (set by the worker's query endpoint): the next update reads them, whatever the changelogs did."""
        self.restored = 0
        """Changelog records applied since this standby opened."""
        self.lag = -1
        """Changelog records (and, under exactly-once, commit markers) it had not applied when it last
        looked; -1 before its first update."""

    def _clients(self) -> tuple[Any, ...]:
        return (self._consumer,)

    def committed_partitions(self) -> set[tuple[str, int]]:
        """The partitions whose committed offsets ``update`` takes: the task's inputs (its position)
        and the source topics of its source-changelog stores (restored up to them)."""
        sourced = {(tp.topic, tp.partition) for tp in self.task.source_changelog_partitions().values()}
        return self._inputs() | sourced

    def _inputs(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.task.partition_group.queues}

    def read_committed(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The group's committed offsets of ``partitions`` (any standbys' of the application), read with
        this standby's consumer: one request for all of a thread's standbys (``update_all``)."""
        return committed_offsets(self._consumer, self._config.application_id, partitions, TIMEOUT_S)

    def wants_committed(self) -> bool:
        """Reads where its changelogs end (its ``lag``), and says whether the group's committed offsets
        can move its position now: a changelog grew since it last looked (the active wrote, so it
        committed or will), a query bounded by a position asked it since the last read (which the next
        read is for), or that read is ``COMMITTED_EVERY_S`` old (offsets of records that changed no
        state, or committed at least once after writes already read)."""
        offsets = self.task.restore_offsets()
        ends = {store: end_offset(self._consumer, tp.topic, tp.partition)
                for store, tp in self.task.changelog_partitions().items()}
        self.lag = sum(max(0, end - (offsets[store] or 0)) for store, end in ends.items())
        grew, self._seen_ends = ends != self._seen_ends, ends
        self._unchanged = not grew
        asked, self.bound_asked = self.bound_asked, False
        return grew or asked or time.monotonic() - self._committed_at >= COMMITTED_EVERY_S

    def update(self, committed: Mapping[tuple[str, int], int] | None) -> int:
        """Applies what the changelogs gained since the last update; returns the records applied.

        ``committed``: the group's offsets of ``committed_partitions``, read before the changelogs
        (``update_all``), or None when they were not read this time (the last ones stand). Its position
        (interactive queries' Position) is then those of its inputs: the active commits its changelog
        writes before (at least once) or with (exactly once) its input offsets, so changelogs read to
        their ends afterwards hold every write of the inputs before those offsets.

        Without a committed read, when ``wants_committed`` found no changelog grown, their ends are not
        read a second time: the last update read them to those ends (read after its own look), so
        there is nothing to apply, and the position stands. After a committed read they are read again,
        to their ends now, for the position to hold."""
        unchanged, self._unchanged = self._unchanged, False
        if committed is None and unchanged:
            return 0
        if committed is not None:
            self._committed, self._committed_at = committed, time.monotonic()
        applied = restore_task(self.task, self._consumer, log_ends=self._log_ends, committed=self._committed)
        self.restored += applied
        if committed is not None:
            self.task.committed_position = {tp: committed[tp] - 1 for tp in self._inputs() if tp in committed}
        return applied


def update_all(standbys: Sequence[StandbyTask]) -> None:
    """Updates ``standbys`` (one stream thread's), every ``UPDATE_EVERY_S``. The group's committed offsets,
    their positions, are read once for all of them, and only when one of them wants them
    (``wants_committed``): an idle application's standbys ask every ``COMMITTED_EVERY_S``."""
    if not standbys:
        return
    wanted = [standby.wants_committed() for standby in standbys]  # each looks at its changelogs
    committed = None
    if any(wanted):
        partitions = set().union(*(standby.committed_partitions() for standby in standbys))
        committed = standbys[0].read_committed(partitions)
    for standby in standbys:
        standby.update(committed)
